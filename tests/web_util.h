/* web_util.h — servers for the web tests, each a forked process on
 * 127.0.0.1 with an ephemeral port, killed (with everything it forked) by
 * its stop function or when the test's process group goes.
 *
 * The page fixture serves fixed routes over HTTP/1.0-style connections:
 *   /static /js /api/data /alert /big /hang /nohead /busy /notfound
 *   /redirect /download /html/?q= (DuckDuckGo-like results) /generic?q=
 *   /blocked?q= /json/version (not JSON) /json/close/ID (never answers)
 * The fake DevTools server speaks WebSocket; the path picks its behaviour:
 *   /ok        answers every command {"id":N,"result":{"echo":METHOD}},
 *              preceded by an event {"method":"Fake.event",...}
 *   /stray     answers with a wrong id first, then the right one
 *   /onlystray answers with a wrong id only
 *   /badjson   answers with broken JSON
 *   /notobject answers with a JSON array
 *   /noid      answers with an object that has neither id nor method
 *   /error     answers with {"error":{"code":…,"message":"Boom happened"}}
 *   /close     closes the connection on the first command
 *   /silent    never answers
 */
#ifndef DS4CL_TESTS_WEB_UTIL_H
#define DS4CL_TESTS_WEB_UTIL_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int port;
    char base[64]; /* "http://127.0.0.1:PORT" or "ws://127.0.0.1:PORT" */
} web_server;

/* Both fail the test when the server cannot start. */
void web_fixture_start(web_server *s);
void web_fake_cdp_start(web_server *s);
void web_server_stop(web_server *s);

/* Size of the /big page's text in bytes (about 1.6 MB). */
#define WEB_FIXTURE_BIG_PARAGRAPHS 16000

/* A loopback port nothing listens on (bound, then released). */
int web_unused_port(void);

/* Skips the test when no Chromium/Chrome is installed. */
void web_require_browser(void);

/* Processes (not zombies) whose command line contains needle. */
int web_count_processes(const char *needle);
/* Sends those SIGKILL (from this process: a shell loop doing it would
 * hold the needle in its own command line and, its pid below theirs
 * after the pids wrap, kill itself first); how many there were. */
int web_kill_processes(const char *needle);

#endif
