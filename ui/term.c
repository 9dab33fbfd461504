/* term.c — curses set up and torn down, colours, and the signals that must
 * leave the terminal usable (see term.h and ui.h). */
#include "ui/term.h"

#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <term.h>
#include <termios.h>
#include <unistd.h>

#include "base/base.h"

#define STDERR_TAIL_BYTES 4096
#define STDERR_LOG_MAX (1 << 20)

static bool g_active, g_started, g_color, g_256;
static SCREEN *g_screen;
static struct termios g_saved_tty;
static bool g_have_tty;
static int g_sig_pipe[2] = { -1, -1 };
static volatile sig_atomic_t g_term_pending;
static int g_saved_stderr = -1;
static char g_log_path[4096];
static off_t g_log_start;
static char g_altstack[65536];

/* What every way out writes: bracketed paste and mouse reports off,
 * attributes reset, cursor shown, the main screen back. */
static const char RESET_SEQ[] = "\033[?2004l\033[?1006l\033[?1002l\033[?1000l\033[0m\033[?25h\033[?1049l\r\n";

static void write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            return;
        }
        s += w;
        n -= (size_t)w;
    }
}

static const char *sig_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

/* Only async-signal-safe calls from here on. */
static void emergency_restore(void)
{
    write_all(STDOUT_FILENO, RESET_SEQ, sizeof RESET_SEQ - 1);
    if (g_have_tty) tcsetattr(STDIN_FILENO, TCSANOW, &g_saved_tty);
    if (g_saved_stderr >= 0) dup2(g_saved_stderr, STDERR_FILENO);
}

static void on_crash(int sig)
{
    int saved = errno;
    if (g_active) {
        emergency_restore();
        const char *name = sig_name(sig);
        write_all(STDERR_FILENO, "ds4cl: crashed (", 16);
        write_all(STDERR_FILENO, name, strlen(name));
        static const char rest[] = "); the session is saved up to its last finished turn\n";
        write_all(STDERR_FILENO, rest, sizeof rest - 1);
    }
    errno = saved;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void on_signal(int sig)
{
    int saved = errno;
    if ((sig == SIGTERM || sig == SIGHUP) && g_term_pending) {
        /* asked twice: leave now */
        if (g_active) {
            emergency_restore();
            static const char msg[] = "ds4cl: terminated\n";
            write_all(STDERR_FILENO, msg, sizeof msg - 1);
        }
        _exit(128 + sig);
    }
    if (sig == SIGTERM || sig == SIGHUP) g_term_pending = 1;
    unsigned char c = (unsigned char)sig;
    if (g_sig_pipe[1] >= 0) {
        ssize_t w = write(g_sig_pipe[1], &c, 1);
        (void)w;
    }
    errno = saved;
}

/* SIGTERM, SIGHUP and SIGINT are the loop's while the screen is ours,
 * and do what they normally do otherwise (loading a model, saving). */
static void quit_signals(bool ours)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = ours ? on_signal : SIG_DFL;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (!ours) {
        g_term_pending = 0;
        while (ui_term_take_signal()) {
        }
    }
}

static void install_signals(void)
{
    if (g_sig_pipe[0] < 0 && pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) g_sig_pipe[0] = g_sig_pipe[1] = -1;
    struct sigaction sa;
    quit_signals(true);

    stack_t ss = { .ss_sp = g_altstack, .ss_size = sizeof g_altstack, .ss_flags = 0 };
    sigaltstack(&ss, NULL);
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
    int crash[] = { SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL };
    for (size_t i = 0; i < sizeof crash / sizeof *crash; i++) sigaction(crash[i], &sa, NULL);
}

int ui_term_signal_fd(void) { return g_sig_pipe[0]; }

int ui_term_take_signal(void)
{
    unsigned char c;
    if (g_sig_pipe[0] >= 0 && read(g_sig_pipe[0], &c, 1) == 1) return c;
    return 0;
}

bool ui_term_active(void) { return g_active; }

/* ---- standard error while the screen is ours ---------------------------------------- */

static void stderr_to_log(void)
{
    char dir[4000];
    if (!xdg_dir(XDG_STATE, dir, sizeof dir)) return;
    snprintf(g_log_path, sizeof g_log_path, "%s/stderr.log", dir);
    int fd = open(g_log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return;
    struct stat st;
    g_log_start = fstat(fd, &st) == 0 ? st.st_size : 0;
    if (g_log_start > STDERR_LOG_MAX && ftruncate(fd, 0) == 0) g_log_start = 0;
    fflush(stderr);
    g_saved_stderr = dup(STDERR_FILENO);
    if (g_saved_stderr < 0 || dup2(fd, STDERR_FILENO) < 0) {
        if (g_saved_stderr >= 0) close(g_saved_stderr);
        g_saved_stderr = -1;
    }
    close(fd);
}

static void stderr_back(void)
{
    if (g_saved_stderr < 0) return;
    fflush(stderr);
    dup2(g_saved_stderr, STDERR_FILENO);
    close(g_saved_stderr);
    g_saved_stderr = -1;
    /* what was written meanwhile, its last lines */
    int fd = open(g_log_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size > g_log_start) {
        off_t from = st.st_size - g_log_start > STDERR_TAIL_BYTES ? st.st_size - STDERR_TAIL_BYTES : g_log_start;
        char buf[STDERR_TAIL_BYTES];
        ssize_t n = pread(fd, buf, sizeof buf, from);
        if (n > 0) {
            size_t skip = 0;
            if (from > g_log_start)
                while (skip < (size_t)n && buf[skip++] != '\n') {
                }
            fprintf(stderr, "ds4cl: written to standard error while the interface ran (all of it in %s):\n",
                    g_log_path);
            fwrite(buf + skip, 1, (size_t)n - skip, stderr);
            if (buf[n - 1] != '\n') fputc('\n', stderr);
        }
    }
    close(fd);
}

/* ---- colours ------------------------------------------------------------------------- */

static void init_colors(void)
{
    short grey = g_256 ? 244 : (COLORS >= 16 ? 8 : COLOR_WHITE);
    short status_bg = g_256 ? 236 : COLOR_BLUE, status_fg = g_256 ? 252 : COLOR_WHITE;
    struct {
        int role;
        short fg, bg;
    } map[] = {
        { UI_C_USER, -1, -1 },
        { UI_C_THINK, grey, -1 },
        { UI_C_CODE, COLOR_CYAN, -1 },
        { UI_C_FENCE, grey, -1 },
        { UI_C_HEADING, COLOR_MAGENTA, -1 },
        { UI_C_TOOL, COLOR_CYAN, -1 },
        { UI_C_OK, COLOR_GREEN, -1 },
        { UI_C_PATH, COLOR_GREEN, -1 },
        { UI_C_NUMBER, COLOR_YELLOW, -1 },
        { UI_C_ADD, COLOR_GREEN, -1 },
        { UI_C_DEL, COLOR_RED, -1 },
        { UI_C_ERROR, COLOR_RED, -1 },
        { UI_C_NOTICE, COLOR_YELLOW, -1 },
        { UI_C_MUTED, grey, -1 },
        { UI_C_ACCENT, COLOR_BLUE, -1 },
        { UI_C_STATUS, status_fg, status_bg },
        { UI_C_BAR, COLOR_MAGENTA, status_bg },
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) init_pair((short)map[i].role, map[i].fg, map[i].bg);
}

void ui_term_style(ui_style st, attr_t *attr, short *pair)
{
    attr_t a = A_NORMAL;
    if (st & UI_BOLD) a |= A_BOLD;
    if (st & UI_DIM) a |= A_DIM;
    if (st & UI_UNDERLINE) a |= A_UNDERLINE;
    if (st & UI_REVERSE) a |= A_REVERSE;
#ifdef A_ITALIC
    if (st & UI_ITALIC) a |= A_ITALIC;
#endif
    int role = UI_ROLE(st);
    *pair = 0;
    if (g_color) {
        if (role > 0 && role < UI_C_COUNT) *pair = (short)role;
        if (role == UI_C_USER) a |= A_BOLD;
    } else {
        /* monochrome: the roles that matter become attributes */
        switch (role) {
        case UI_C_THINK:
        case UI_C_MUTED:
        case UI_C_FENCE:
        case UI_C_DEL: a |= A_DIM; break;
        case UI_C_USER:
        case UI_C_HEADING:
        case UI_C_TOOL:
        case UI_C_ERROR:
        case UI_C_NOTICE:
        case UI_C_ADD:
        case UI_C_BAR: a |= A_BOLD; break;
        case UI_C_PATH: a |= A_UNDERLINE; break;
        case UI_C_STATUS: a |= A_REVERSE; break;
        default: break;
        }
        if (role == UI_C_BAR) a |= A_REVERSE;
    }
    *attr = a;
}

void ui_term_draw_line(const ui_line *l)
{
    for (size_t s = 0; s < l->n_spans; s++) {
        attr_t a;
        short p;
        ui_term_style(l->spans[s].style, &a, &p);
        attr_set(a, p, NULL);
        addnstr(l->text + l->spans[s].off, (int)l->spans[s].len);
    }
    attr_set(A_NORMAL, 0, NULL);
}

/* ---- start and stop ------------------------------------------------------------------ */

/* Only the character type: numbers must keep being read and written the
 * C way everywhere else in the process. */
static void select_utf8(void)
{
    setlocale(LC_CTYPE, "");
    const char *cs = nl_langinfo(CODESET);
    if (cs && (!strcmp(cs, "UTF-8") || !strcmp(cs, "utf8"))) return;
    /* the interface speaks UTF-8 whatever the environment says */
    if (!setlocale(LC_CTYPE, "C.UTF-8")) setlocale(LC_CTYPE, "C.utf8");
}

int ui_terminal_check(ds4_error *msg)
{
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        ds4_error_set(msg, "the interactive mode needs a terminal; -p TEXT runs one task without one");
        return -1;
    }
    const char *term = getenv("TERM");
    if (!term || !*term) {
        ds4_error_set(msg, "TERM is not set: the terminal's type is unknown");
        return -1;
    }
    int err = 0;
    if (setupterm(term, STDOUT_FILENO, &err) != OK) {
        ds4_error_set(msg, "cannot use the terminal \"%s\" (no terminfo entry?)", term);
        return -1;
    }
    const char *cup = tigetstr("cursor_address");
    if (!cup || cup == (char *)-1) cup = tigetstr("cup");
    bool ok = cup && cup != (char *)-1;
    del_curterm(cur_term);
    if (!ok) {
        ds4_error_set(msg, "the terminal \"%s\" cannot place its cursor; -p TEXT runs without one", term);
        return -1;
    }
    return 0;
}

int ui_term_start(bool no_color, ds4_error *msg)
{
    if (g_active) return 0;
    if (g_started) {
        stderr_to_log();
        quit_signals(true);
        reset_prog_mode();
        clearok(curscr, TRUE); /* what the terminal shows now is unknown */
        fputs("\033[?2004h", stdout);
        fflush(stdout);
        refresh();
        g_active = true;
        return 0;
    }
    if (ui_terminal_check(msg) != 0) return -1;
    select_utf8();
    g_have_tty = tcgetattr(STDIN_FILENO, &g_saved_tty) == 0;
    g_screen = newterm(NULL, stdout, stdin);
    if (!g_screen) {
        ds4_error_set(msg, "cannot use the terminal \"%s\"", getenv("TERM"));
        return -1;
    }
    set_term(g_screen);
    g_started = g_active = true;
    install_signals();
    raw();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    nodelay(stdscr, TRUE);
    set_escdelay(25);
    meta(stdscr, TRUE);
    g_color = !no_color && has_colors();
    if (g_color) {
        start_color();
        use_default_colors();
        g_256 = COLORS >= 256;
        init_colors();
    }
    mousemask(BUTTON4_PRESSED | BUTTON5_PRESSED, NULL);
    mouseinterval(0);
    define_key("\033[200~", UI_KEY_PASTE_BEGIN);
    define_key("\033[201~", UI_KEY_PASTE_END);
    define_key("\033[1;5D", UI_KEY_CTRL_LEFT);
    define_key("\033[1;5C", UI_KEY_CTRL_RIGHT);
    define_key("\033[1;5H", UI_KEY_CTRL_HOME);
    define_key("\033[1;5F", UI_KEY_CTRL_END);
    fputs("\033[?2004h", stdout);
    fflush(stdout);
    stderr_to_log();
    return 0;
}

void ui_term_stop(void)
{
    if (!g_active) return;
    g_active = false;
    fputs("\033[?2004l", stdout);
    fflush(stdout);
    mousemask(0, NULL);
    endwin();
    stderr_back();
    quit_signals(false);
}

void ui_term_suspend(void)
{
    if (!g_active) return;
    def_prog_mode();
    ui_term_stop();
    raise(SIGTSTP);
    /* continued */
    ui_term_start(!g_color, NULL);
}
