/* The snapshot cache of `ds4cl serve` under agent traffic: what a server
 * killed mid-save leaves in the cache directory, the same prompt sent again
 * after another conversation took the session (and after a restart), and
 * the replayed agent session of ds4cl-bench. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "tests/serve_util.h"
#include "tests/test.h"

static bool exists(const char *path) { return access(path, F_OK) == 0; }

TEST(serve_cache, leftover_temporary_files_of_a_killed_save_go_at_start)
{
    const char *dir = test_tmp_path("cache");
    CHECK_EQ_INT(base_mkdir_p(dir, 0700), 0);
    long dead = test_dead_pid();
    /* what file_write_atomic leaves when its process is killed mid-save */
    const char *tok = test_printf("%s/.00c0ffee00c0ffee.tok.tmp.%ld.AbC123", dir, dead);
    const char *snap = test_printf("%s/.00c0ffee00c0ffee.snap.tmp.%ld.zZ9yX8", dir, dead);
    /* a writer that still runs (this process) keeps its file */
    const char *live = test_printf("%s/.1111222233334444.snap.tmp.%ld.qwerty", dir, (long)getpid());
    test_write_file(tok, "partial", 7);
    test_write_file(snap, "partial", 7);
    test_write_file(live, "partial", 7);
    const char *lines[] = { srv_reply_line("a</think>Hi.", NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    CHECK_MSG(!exists(tok), "%s survived the start", tok);
    CHECK_MSG(!exists(snap), "%s survived the start", snap);
    CHECK(exists(live));
    CHECK_EQ_INT(srv_stop(&s), 0);
}
