/* Model downloads against a local HTTP server: full, resumed, retried,
 * refused; size and hash checks; the CLI end to end, including Ctrl+C;
 * the default model link and the resolver's friendly message; progress
 * formatting. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "download/download.h"
#include "cli/model_path.h"
#include "base/progress.h"
#include "tests/dl_util.h"
#include "tests/test.h"

#define FILE_LEN (300 * 1024 + 123)

typedef struct {
    unsigned char *body;
    char sha[65];
    dlsrv_config cfg;
    dlsrv srv;
    const char *dest, *part;
} fixture;

static void fixture_init(fixture *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->body = dl_test_bytes(FILE_LEN, 7);
    dl_sha256_hex(f->body, FILE_LEN, f->sha);
    f->cfg.body = f->body;
    f->cfg.len = FILE_LEN;
    f->cfg.path = path;
    f->dest = test_tmp_path("out/model.gguf");
    f->part = test_tmp_path("out/model.gguf.part");
    base_mkdir_p(test_tmp_path("out"), 0755);
    /* Keep the default-model link and HF token lookups inside the test. */
    setenv("XDG_DATA_HOME", test_tmp_path("xdg"), 1);
    setenv("HOME", test_tmp_path("home"), 1);
    unsetenv("HF_TOKEN");
    unsetenv("HF_HOME");
    unsetenv("DS4CL_MODEL_BASE_URL");
}

static download_request quick_request(const fixture *f, const char *url)
{
    return (download_request){
        .url = url,
        .dest = f->dest,
        .max_retries = 4,
        .backoff_ms = 5,
        .backoff_max_ms = 20,
        .stall_timeout_s = 10,
        .quiet = true,
    };
}

static void check_dest_is_body(const fixture *f)
{
    size_t n = 0;
    char *got = test_read_file(f->dest, &n);
    CHECK_MSG(got != NULL, "%s missing", f->dest);
    CHECK_EQ_INT(n, FILE_LEN);
    CHECK(memcmp(got, f->body, FILE_LEN) == 0);
    CHECK_EQ_INT(dl_file_size(f->part), -1);
}

static void check_nothing_published(const fixture *f)
{
    CHECK_EQ_INT(dl_file_size(f->dest), -1);
}

/* ---- library: download_file ------------------------------------------ */

TEST(download_http, full_download_verifies_hash)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.redirect = true; /* like Hugging Face: 302 carrying X-Linked-* */
    f.cfg.linked_size = FILE_LEN;
    f.cfg.linked_etag = f.sha;
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK_MSG(st == DOWNLOAD_OK, "status %d: %s", st, res.error);
    check_dest_is_body(&f);
    CHECK(res.sha256_checked);
    CHECK_STR_EQ(res.sha256, f.sha);
    CHECK_EQ_INT(res.size, FILE_LEN);
    CHECK_EQ_INT(res.fetched, FILE_LEN);
    CHECK_EQ_INT(res.resumed_from, 0);
    CHECK_EQ_INT(f.srv.stats->n_get, 1);
    CHECK_EQ_INT(f.srv.stats->bytes_served, FILE_LEN);
    dlsrv_stop(&f.srv);
}

TEST(download_http, dropped_connection_resumes_where_it_stopped)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.linked_etag = f.sha;
    f.cfg.get[0] = (dlsrv_action){ DLSRV_DROP, 100000, 0 };
    f.cfg.n_get = 1;
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK_MSG(st == DOWNLOAD_OK, "status %d: %s", st, res.error);
    check_dest_is_body(&f);
    CHECK(res.sha256_checked);
    CHECK_EQ_INT(f.srv.stats->n_get, 2);
    CHECK_EQ_INT(f.srv.stats->range_start[0], -1);
    CHECK_EQ_INT(f.srv.stats->range_start[1], 100000);
    CHECK_EQ_INT(f.srv.stats->get_bytes[0], 100000);
    CHECK_EQ_INT(f.srv.stats->get_bytes[1], FILE_LEN - 100000);
    /* not one byte fetched twice */
    CHECK_EQ_INT(f.srv.stats->bytes_served, FILE_LEN);
    CHECK_EQ_INT(res.fetched, FILE_LEN);
    dlsrv_stop(&f.srv);
}

TEST(download_http, existing_part_is_hashed_and_continued)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.linked_etag = f.sha;
    test_write_file(f.part, f.body, 123456);
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK_MSG(st == DOWNLOAD_OK, "status %d: %s", st, res.error);
    check_dest_is_body(&f);
    CHECK(res.sha256_checked);
    CHECK_EQ_INT(res.resumed_from, 123456);
    CHECK_EQ_INT(res.fetched, FILE_LEN - 123456);
    CHECK_EQ_INT(f.srv.stats->range_start[0], 123456);
    CHECK_EQ_INT(f.srv.stats->bytes_served, FILE_LEN - 123456);
    dlsrv_stop(&f.srv);
}

TEST(download_http, server_errors_midway_are_retried)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.linked_etag = f.sha;
    f.cfg.get[0] = (dlsrv_action){ DLSRV_DROP, 50000, 0 };
    f.cfg.get[1] = (dlsrv_action){ DLSRV_STATUS, 0, 500 };
    f.cfg.get[2] = (dlsrv_action){ DLSRV_STATUS, 0, 503 };
    f.cfg.n_get = 3;
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK_MSG(st == DOWNLOAD_OK, "status %d: %s", st, res.error);
    check_dest_is_body(&f);
    CHECK_EQ_INT(res.attempts, 4);
    CHECK_EQ_INT(f.srv.stats->n_get, 4);
    CHECK_EQ_INT(f.srv.stats->range_start[3], 50000);
    CHECK_EQ_INT(f.srv.stats->bytes_served, FILE_LEN);
    dlsrv_stop(&f.srv);
}

TEST(download_http, stalled_transfer_times_out_and_resumes)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.get[0] = (dlsrv_action){ DLSRV_STALL, 60000, 0 }; /* then silence */
    f.cfg.n_get = 1;
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    rq.stall_timeout_s = 1;
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK_MSG(st == DOWNLOAD_OK, "status %d: %s", st, res.error);
    check_dest_is_body(&f);
    CHECK_EQ_INT(f.srv.stats->n_get, 2);
    CHECK_EQ_INT(f.srv.stats->range_start[1], 60000);
    CHECK_EQ_INT(f.srv.stats->bytes_served, FILE_LEN);
    dlsrv_stop(&f.srv);
}

TEST(download_http, persistent_server_errors_give_up)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    for (int i = 0; i < DLSRV_MAX_ACTIONS; i++) f.cfg.get[i] = (dlsrv_action){ DLSRV_STATUS, 0, 500 };
    f.cfg.n_get = DLSRV_MAX_ACTIONS;
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    rq.max_retries = 2;
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK(st == DOWNLOAD_FAILED);
    CHECK_CONTAINS(res.error, "HTTP 500");
    CHECK_CONTAINS(res.error, "gave up after 3 attempts");
    CHECK_EQ_INT(res.attempts, 3);
    CHECK_EQ_INT(f.srv.stats->n_get, 3);
    check_nothing_published(&f);
    /* nothing was received: no empty .part left behind */
    CHECK_EQ_INT(dl_file_size(f.part), -1);
    dlsrv_stop(&f.srv);
}

TEST(download_http, server_without_range_starts_over)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.no_range = true;
    f.cfg.linked_etag = f.sha;
    /* a stale part whose bytes must not survive */
    unsigned char *junk = dl_test_bytes(5000, 99);
    test_write_file(f.part, junk, 5000);
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK_MSG(st == DOWNLOAD_OK, "status %d: %s", st, res.error);
    check_dest_is_body(&f);
    CHECK(res.sha256_checked);
    CHECK_EQ_INT(f.srv.stats->bytes_served, FILE_LEN);
    dlsrv_stop(&f.srv);
}

TEST(download_http, published_size_mismatch_is_refused)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.redirect = true;
    f.cfg.linked_size = FILE_LEN + 7;
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK(st == DOWNLOAD_FAILED);
    CHECK_CONTAINS(res.error, "size mismatch");
    CHECK_EQ_INT(f.srv.stats->n_get, 0);
    check_nothing_published(&f);
    CHECK_EQ_INT(dl_file_size(f.part), -1);
    dlsrv_stop(&f.srv);
}

TEST(download_http, server_claiming_more_than_it_sends_fails_keeping_part)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.claim_len = FILE_LEN + 1000;
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    rq.max_retries = 2;
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK(st == DOWNLOAD_FAILED);
    CHECK_CONTAINS(res.error, "gave up");
    check_nothing_published(&f);
    /* the honest prefix stays for a later resume */
    CHECK_EQ_INT(dl_file_size(f.part), FILE_LEN);
    CHECK_EQ_INT(f.srv.stats->range_start[1], FILE_LEN);
    dlsrv_stop(&f.srv);
}

TEST(download_http, hash_mismatch_deletes_the_damaged_file)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    char wrong[65];
    memcpy(wrong, f.sha, 65);
    wrong[0] = wrong[0] == '0' ? '1' : '0';
    f.cfg.linked_etag = wrong;
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    download_result res;
    download_status st = download_file(&rq, &res);
    CHECK(st == DOWNLOAD_FAILED);
    CHECK_CONTAINS(res.error, "SHA-256 mismatch");
    CHECK_CONTAINS(res.error, f.sha);
    check_nothing_published(&f);
    CHECK_EQ_INT(dl_file_size(f.part), -1);
    dlsrv_stop(&f.srv);
}

TEST(download_http, not_found_is_final_and_leaves_nothing)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/other.gguf"));
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK(st == DOWNLOAD_FAILED);
    CHECK_CONTAINS(res.error, "not found");
    CHECK_CONTAINS(res.error, "404");
    CHECK_EQ_INT(res.http_status, 404);
    CHECK_EQ_INT(f.srv.stats->n_requests, 1); /* no GET after a 404 HEAD, no retries */
    check_nothing_published(&f);
    CHECK_EQ_INT(dl_file_size(f.part), -1);
    dlsrv_stop(&f.srv);
}

TEST(download_http, connection_refused_is_reported)
{
    fixture f;
    fixture_init(&f, NULL);
    const char *url = test_printf("http://127.0.0.1:%d/m/model.gguf", dl_unused_port());
    download_request rq = quick_request(&f, url);
    rq.max_retries = 8; /* capped at 3 when the server was never reached */
    download_result res;
    download_status st = download_file(&rq, &res);
    CHECK(st == DOWNLOAD_FAILED);
    CHECK_CONTAINS(res.error, "cannot reach the server");
    CHECK_CONTAINS(res.error, "gave up after 4 attempts");
    check_nothing_published(&f);
    CHECK_EQ_INT(dl_file_size(f.part), -1);
}

TEST(download_http, complete_part_is_finished_without_refetching)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.head_status = 405; /* no size known up front: the 416 tells */
    test_write_file(f.part, f.body, FILE_LEN);
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK_MSG(st == DOWNLOAD_OK, "status %d: %s", st, res.error);
    check_dest_is_body(&f);
    CHECK_EQ_INT(res.fetched, 0);
    CHECK_EQ_INT(f.srv.stats->bytes_served, 0);
    dlsrv_stop(&f.srv);
}

TEST(download_http, refused_head_leaves_the_verdict_to_get)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.head_status = 403; /* e.g. a CDN URL signed for GET only */
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK_MSG(st == DOWNLOAD_OK, "status %d: %s", st, res.error);
    check_dest_is_body(&f);
    CHECK_EQ_INT(f.srv.stats->n_head, 1);
    CHECK_EQ_INT(f.srv.stats->n_get, 1);
    dlsrv_stop(&f.srv);
}

TEST(download_http, bearer_token_is_sent)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    dlsrv_start(&f.srv, &f.cfg);
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    rq.token = "hf_secret123";
    download_result res;
    download_status st = download_file(&rq, &res);
    dlsrv_settle(&f.srv);
    CHECK_MSG(st == DOWNLOAD_OK, "status %d: %s", st, res.error);
    CHECK_EQ_INT(f.srv.stats->n_requests, 2);
    CHECK_STR_EQ(f.srv.stats->auth[0], "Bearer hf_secret123");
    CHECK_STR_EQ(f.srv.stats->auth[1], "Bearer hf_secret123");
    dlsrv_stop(&f.srv);
}

TEST(download_http, interrupt_flag_stops_and_keeps_part)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    test_write_file(f.part, f.body, 1000);
    dlsrv_start(&f.srv, &f.cfg);
    volatile sig_atomic_t stop = 1;
    download_request rq = quick_request(&f, dlsrv_url(&f.srv, "/m/model.gguf"));
    rq.interrupted = &stop;
    download_result res;
    download_status st = download_file(&rq, &res);
    CHECK(st == DOWNLOAD_INTERRUPTED);
    check_nothing_published(&f);
    CHECK_EQ_INT(dl_file_size(f.part), 1000);
    dlsrv_stop(&f.srv);
}

/* ---- names and URLs ---------------------------------------------------- */

TEST(download_names, targets_and_urls)
{
    char url[4096], file[1024];
    ds4_error err = { "" };
    unsetenv("DS4CL_MODEL_BASE_URL");
    CHECK_EQ_INT(download_resolve("q2-imatrix", NULL, url, sizeof url, file, sizeof file, &err), 0);
    CHECK_STR_EQ(file, "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf");
    CHECK_STR_EQ(url, "https://huggingface.co/antirez/deepseek-v4-gguf/resolve/main/"
                      "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf");
    CHECK_EQ_INT(download_resolve("q4", "http://h/base/", url, sizeof url, file, sizeof file, &err), 0);
    CHECK_STR_EQ(url, "http://h/base/DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2.gguf");
    setenv("DS4CL_MODEL_BASE_URL", "http://127.0.0.1:9/r", 1);
    CHECK_EQ_INT(download_resolve("q2", NULL, url, sizeof url, file, sizeof file, &err), 0);
    CHECK_STR_EQ(url, "http://127.0.0.1:9/r/DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2.gguf");
    CHECK_EQ_INT(download_resolve("https://example.org/a/b/My.gguf?download=true", NULL, url, sizeof url,
                                  file, sizeof file, &err), 0);
    CHECK_STR_EQ(file, "My.gguf");
    CHECK_STR_EQ(url, "https://example.org/a/b/My.gguf?download=true");
    CHECK_EQ_INT(download_resolve("https://example.org/", NULL, url, sizeof url, file, sizeof file, &err), -1);
    CHECK_CONTAINS(err.msg, "file name");
    CHECK_EQ_INT(download_resolve("https://example.org/a/..", NULL, url, sizeof url, file, sizeof file, &err), -1);
    CHECK_EQ_INT(download_resolve("q3", NULL, url, sizeof url, file, sizeof file, &err), -1);
    CHECK_CONTAINS(err.msg, "q2-imatrix");
    CHECK(download_target_find("q4-imatrix") != NULL);
    CHECK(download_target_find("mtp") == NULL);
}

/* ---- the ds4cl binary ---------------------------------------------------- */

static const char *cli_env(void)
{
    return test_printf("XDG_DATA_HOME='%s' HOME='%s' HF_TOKEN= DS4CL_DOWNLOAD_BACKOFF_MS=5 DS4CL_DOWNLOAD_STALL_S=10",
                       test_tmp_path("xdg"), test_tmp_path("home"));
}

static void check_default_link(const char *target)
{
    char buf[PATH_MAX], real_target[PATH_MAX];
    CHECK(default_model_path(buf, sizeof buf) != NULL);
    char resolved[PATH_MAX];
    CHECK_MSG(realpath(buf, resolved) != NULL, "no default model at %s", buf);
    CHECK(realpath(target, real_target) != NULL);
    CHECK_STR_EQ(resolved, real_target);
}

TEST(download_cli, full_download_by_url_sets_default)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.redirect = true;
    f.cfg.linked_size = FILE_LEN;
    f.cfg.linked_etag = f.sha;
    dlsrv_start(&f.srv, &f.cfg);
    char *out;
    int rc = test_runf(&out, "%s '%s/ds4cl' download '%s' --dir '%s'", cli_env(), test_bindir(),
                       dlsrv_url(&f.srv, "/m/model.gguf"), test_tmp_path("out"));
    CHECK_MSG(rc == 0, "rc %d:\n%s", rc, out);
    check_dest_is_body(&f);
    CHECK_CONTAINS(out, "SHA-256 verified");
    CHECK_CONTAINS(out, "100%"); /* plain progress lines: stderr is no tty */
    CHECK(strchr(out, '\r') == NULL);
    CHECK_CONTAINS(out, "default model");
    check_default_link(f.dest);

    /* A second run finds the file and asks the server nothing. */
    dlsrv_settle(&f.srv);
    int before = f.srv.stats->n_requests;
    rc = test_runf(&out, "%s '%s/ds4cl' download '%s' --dir '%s'", cli_env(), test_bindir(),
                   dlsrv_url(&f.srv, "/m/model.gguf"), test_tmp_path("out"));
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "already downloaded");
    CHECK_EQ_INT(f.srv.stats->n_requests, before);
    dlsrv_stop(&f.srv);
}

TEST(download_cli, named_target_uses_base_url_and_hf_token)
{
    fixture f;
    const download_target *t = download_target_find("q2");
    fixture_init(&f, test_printf("/repo/resolve/main/%s", t->file));
    dlsrv_start(&f.srv, &f.cfg);
    char *out;
    int rc = test_runf(&out, "%s HF_TOKEN=hf_abc DS4CL_MODEL_BASE_URL='%s' '%s/ds4cl' download q2 --dir '%s'",
                       cli_env(), dlsrv_url(&f.srv, "/repo/resolve/main"), test_bindir(), test_tmp_path("out"));
    dlsrv_settle(&f.srv);
    CHECK_MSG(rc == 0, "rc %d:\n%s", rc, out);
    const char *dest = test_tmp_path("out/%s", t->file);
    CHECK_EQ_INT(dl_file_size(dest), FILE_LEN);
    CHECK_STR_EQ(f.srv.stats->auth[0], "Bearer hf_abc");
    check_default_link(dest);
    dlsrv_stop(&f.srv);
}

TEST(download_cli, hf_token_is_not_sent_to_other_hosts)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    dlsrv_start(&f.srv, &f.cfg);
    char *out;
    int rc = test_runf(&out, "%s HF_TOKEN=hf_abc '%s/ds4cl' download '%s' --dir '%s'", cli_env(),
                       test_bindir(), dlsrv_url(&f.srv, "/m/model.gguf"), test_tmp_path("out"));
    dlsrv_settle(&f.srv);
    CHECK_MSG(rc == 0, "rc %d:\n%s", rc, out);
    CHECK_STR_EQ(f.srv.stats->auth[0], "");
    /* --token is explicit: it goes wherever the user sends it */
    unlink(f.dest);
    rc = test_runf(&out, "%s '%s/ds4cl' download '%s' --dir '%s' --token tok", cli_env(),
                   test_bindir(), dlsrv_url(&f.srv, "/m/model.gguf"), test_tmp_path("out"));
    dlsrv_settle(&f.srv);
    CHECK_MSG(rc == 0, "rc %d:\n%s", rc, out);
    CHECK_STR_EQ(f.srv.stats->auth[2], "Bearer tok");
    dlsrv_stop(&f.srv);
}

TEST(download_cli, interrupted_download_resumes_with_remaining_bytes)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.linked_etag = f.sha;
    const uint64_t cut = 131072;
    f.cfg.get[0] = (dlsrv_action){ DLSRV_DROP, cut, 0 };
    f.cfg.n_get = 1;
    dlsrv_start(&f.srv, &f.cfg);
    const char *url = dlsrv_url(&f.srv, "/m/model.gguf");
    char *out;
    int rc = test_runf(&out, "%s DS4CL_DOWNLOAD_RETRIES=0 '%s/ds4cl' download '%s' --dir '%s'", cli_env(),
                       test_bindir(), url, test_tmp_path("out"));
    dlsrv_settle(&f.srv);
    CHECK_MSG(rc == 1, "rc %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "download failed");
    CHECK_CONTAINS(out, "resume");
    check_nothing_published(&f);
    CHECK_EQ_INT(dl_file_size(f.part), cut);
    uint64_t served_first = f.srv.stats->bytes_served;
    CHECK_EQ_INT(served_first, cut);

    rc = test_runf(&out, "%s '%s/ds4cl' download '%s' --dir '%s'", cli_env(), test_bindir(), url,
                   test_tmp_path("out"));
    dlsrv_settle(&f.srv);
    CHECK_MSG(rc == 0, "rc %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "resuming");
    check_dest_is_body(&f);
    CHECK_EQ_INT(f.srv.stats->n_get, 2);
    CHECK_EQ_INT(f.srv.stats->range_start[1], (int64_t)cut);
    CHECK_EQ_INT(f.srv.stats->bytes_served - served_first, FILE_LEN - cut);
    dlsrv_stop(&f.srv);
}

TEST(download_cli, server_error_midway_is_retried_with_backoff)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.get[0] = (dlsrv_action){ DLSRV_DROP, 70000, 0 };
    f.cfg.get[1] = (dlsrv_action){ DLSRV_STATUS, 0, 500 };
    f.cfg.n_get = 2;
    dlsrv_start(&f.srv, &f.cfg);
    char *out;
    int rc = test_runf(&out, "%s '%s/ds4cl' download '%s' --dir '%s'", cli_env(), test_bindir(),
                       dlsrv_url(&f.srv, "/m/model.gguf"), test_tmp_path("out"));
    dlsrv_settle(&f.srv);
    CHECK_MSG(rc == 0, "rc %d:\n%s", rc, out);
    check_dest_is_body(&f);
    CHECK_CONTAINS(out, "HTTP 500");
    CHECK_CONTAINS(out, "retrying in");
    CHECK_EQ_INT(f.srv.stats->n_get, 3);
    CHECK_EQ_INT(f.srv.stats->bytes_served, FILE_LEN);
    dlsrv_stop(&f.srv);
}

TEST(download_cli, wrong_size_fails_without_publishing)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.linked_size = FILE_LEN - 1;
    dlsrv_start(&f.srv, &f.cfg);
    char *out;
    int rc = test_runf(&out, "%s '%s/ds4cl' download '%s' --dir '%s'", cli_env(), test_bindir(),
                       dlsrv_url(&f.srv, "/m/model.gguf"), test_tmp_path("out"));
    CHECK_MSG(rc == 1, "rc %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "size mismatch");
    check_nothing_published(&f);
    char buf[PATH_MAX];
    struct stat st;
    CHECK(lstat(default_model_path(buf, sizeof buf), &st) != 0);
    dlsrv_stop(&f.srv);
}

TEST(download_cli, not_found_is_clear)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    dlsrv_start(&f.srv, &f.cfg);
    char *out;
    int rc = test_runf(&out, "%s '%s/ds4cl' download '%s' --dir '%s'", cli_env(), test_bindir(),
                       dlsrv_url(&f.srv, "/m/model.gguf"), test_tmp_path("out"));
    (void)rc;
    rc = test_runf(&out, "%s '%s/ds4cl' download '%s' --dir '%s'", cli_env(), test_bindir(),
                   dlsrv_url(&f.srv, "/m/nope.gguf"), test_tmp_path("out"));
    CHECK_MSG(rc == 1, "rc %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "not found (HTTP 404)");
    CHECK_EQ_INT(dl_file_size(test_tmp_path("out/nope.gguf")), -1);
    CHECK_EQ_INT(dl_file_size(test_tmp_path("out/nope.gguf.part")), -1);
    dlsrv_stop(&f.srv);
}

TEST(download_cli, no_server_is_clear)
{
    fixture f;
    fixture_init(&f, NULL);
    char *out;
    int rc = test_runf(&out, "%s '%s/ds4cl' download 'http://127.0.0.1:%d/m/model.gguf' --dir '%s'", cli_env(),
                       test_bindir(), dl_unused_port(), test_tmp_path("out"));
    CHECK_MSG(rc == 1, "rc %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "cannot reach the server");
    check_nothing_published(&f);
    CHECK_EQ_INT(dl_file_size(f.part), -1);
}

TEST(download_cli, unknown_target_is_a_usage_error)
{
    fixture f;
    fixture_init(&f, NULL);
    char *out;
    int rc = test_runf(&out, "%s '%s/ds4cl' download q3 --dir '%s'", cli_env(), test_bindir(), test_tmp_path("out"));
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "unknown model 'q3'");
}

static pid_t spawn_download(const char *url, const char *log)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int devnull = open("/dev/null", O_RDONLY);
        if (fd < 0 || devnull < 0) _exit(127);
        dup2(devnull, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        setenv("DS4CL_DOWNLOAD_BACKOFF_MS", "5", 1);
        char *bin = test_printf("%s/ds4cl", test_bindir());
        execl(bin, bin, "download", url, "--dir", test_tmp_path("out"), (char *)NULL);
        _exit(127);
    }
    return pid;
}

TEST(download_cli, ctrl_c_keeps_the_part_for_resuming)
{
    fixture f;
    fixture_init(&f, "/m/model.gguf");
    f.cfg.linked_etag = f.sha;
    const uint64_t cut = 40000;
    f.cfg.get[0] = (dlsrv_action){ DLSRV_STALL, cut, 0 }; /* then silence */
    f.cfg.n_get = 1;
    dlsrv_start(&f.srv, &f.cfg);
    const char *url = dlsrv_url(&f.srv, "/m/model.gguf");
    pid_t pid = spawn_download(url, test_tmp_path("log1"));
    bool stalled = false;
    for (int i = 0; i < 2000 && !stalled; i++) {
        stalled = dl_file_size(f.part) == (long long)cut;
        if (!stalled) usleep(5000);
    }
    if (!stalled) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        FAIL("the download never got going:\n%s", test_read_file(test_tmp_path("log1"), NULL));
    }
    kill(pid, SIGINT);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    char *log = test_read_file(test_tmp_path("log1"), NULL);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 3, "status %#x:\n%s", status, log);
    CHECK_CONTAINS(log, "interrupted");
    CHECK_CONTAINS(log, "run the same command again to resume");
    check_nothing_published(&f);
    CHECK_EQ_INT(dl_file_size(f.part), cut);

    char *out;
    int rc = test_runf(&out, "%s '%s/ds4cl' download '%s' --dir '%s'", cli_env(), test_bindir(), url,
                       test_tmp_path("out"));
    dlsrv_settle(&f.srv);
    CHECK_MSG(rc == 0, "rc %d:\n%s", rc, out);
    check_dest_is_body(&f);
    CHECK_CONTAINS(out, "SHA-256 verified");
    CHECK_EQ_INT(f.srv.stats->n_get, 2);
    CHECK_EQ_INT(f.srv.stats->range_start[1], (int64_t)cut);
    CHECK_EQ_INT(f.srv.stats->get_bytes[1], FILE_LEN - cut);
    CHECK_EQ_INT(f.srv.stats->bytes_served, FILE_LEN);
    dlsrv_stop(&f.srv);
}

/* ---- default model ------------------------------------------------------ */

/* Runs model_path_resolve with stderr captured into a runner-owned string. */
static const char *resolve_capturing(const char *given, char *buf, size_t n, const char **err_text)
{
    int saved = test_stderr_begin();
    const char *r = model_path_resolve(given, buf, n);
    *err_text = test_stderr_end(saved);
    return r;
}

TEST(download_model_path, resolver_explains_when_there_is_no_model)
{
    setenv("XDG_DATA_HOME", test_tmp_path("xdg"), 1);
    char buf[PATH_MAX];
    const char *msg;
    CHECK(resolve_capturing(NULL, buf, sizeof buf, &msg) == NULL);
    CHECK_CONTAINS(msg, "ds4cl download q2-imatrix");
    CHECK_CONTAINS(msg, "-m ");
    CHECK_CONTAINS(msg, test_tmp_path("xdg/ds4cl/models/default"));

    CHECK(resolve_capturing(test_tmp_path("missing.gguf"), buf, sizeof buf, &msg) == NULL);
    CHECK_CONTAINS(msg, "missing.gguf");
    CHECK_CONTAINS(msg, "No such file");
}

TEST(download_model_path, default_link_is_followed_and_replaced)
{
    setenv("XDG_DATA_HOME", test_tmp_path("xdg"), 1);
    const char *a = test_tmp_path("a.gguf"), *b = test_tmp_path("b.gguf");
    test_write_file(a, "A", 1);
    test_write_file(b, "B", 1);
    ds4_error err = { "" };
    char buf[PATH_MAX], real_a[PATH_MAX], real_b[PATH_MAX];
    CHECK(realpath(a, real_a) && realpath(b, real_b));
    CHECK_EQ_INT(default_model_set(a, &err), 0);
    const char *msg;
    const char *r = resolve_capturing(NULL, buf, sizeof buf, &msg);
    CHECK_MSG(r != NULL, "%s", msg);
    CHECK_STR_EQ(r, real_a);
    CHECK_EQ_INT(default_model_set(b, &err), 0);
    r = resolve_capturing(NULL, buf, sizeof buf, &msg);
    CHECK(r != NULL);
    CHECK_STR_EQ(r, real_b);
    /* an explicit -m wins */
    r = resolve_capturing(a, buf, sizeof buf, &msg);
    CHECK_STR_EQ(r, a);
    /* a dangling link is explained */
    unlink(b);
    r = resolve_capturing(NULL, buf, sizeof buf, &msg);
    CHECK(r == NULL);
    CHECK_CONTAINS(msg, "which is missing");
    CHECK_CONTAINS(msg, "ds4cl download q2-imatrix");
}

TEST(download_model_path, a_real_file_at_the_default_path_is_kept)
{
    setenv("XDG_DATA_HOME", test_tmp_path("xdg"), 1);
    char buf[PATH_MAX];
    ds4_error err = { "" };
    const char *dflt = default_model_path(buf, sizeof buf);
    CHECK(dflt != NULL);
    CHECK_EQ_INT(base_mkdir_p(test_tmp_path("xdg/ds4cl/models"), 0755), 0);
    test_write_file(dflt, "GGUF", 4);
    test_write_file(test_tmp_path("other.gguf"), "X", 1);
    CHECK_EQ_INT(default_model_set(test_tmp_path("other.gguf"), &err), -1);
    CHECK_CONTAINS(err.msg, "file of its own");
    size_t n;
    char *kept = test_read_file(dflt, &n);
    CHECK_EQ_INT(n, 4);
    CHECK(memcmp(kept, "GGUF", 4) == 0);
}

/* ---- progress ------------------------------------------------------------ */

TEST(download_progress, units)
{
    char b[32];
    CHECK_STR_EQ(format_bytes(b, sizeof b, 0), "0 B");
    CHECK_STR_EQ(format_bytes(b, sizeof b, 1023), "1023 B");
    CHECK_STR_EQ(format_bytes(b, sizeof b, 1536), "1.50 KiB");
    CHECK_STR_EQ(format_bytes(b, sizeof b, 86586540032ull), "80.6 GiB");
    CHECK_STR_EQ(format_bytes(b, sizeof b, 300ull << 20), "300 MiB");
    CHECK_STR_EQ(format_duration(b, sizeof b, 42.4), "42 s");
    CHECK_STR_EQ(format_duration(b, sizeof b, 552), "9m12s");
    CHECK_STR_EQ(format_duration(b, sizeof b, 7380), "2h03m");
    CHECK_STR_EQ(format_duration(b, sizeof b, -1), "--");
    char line[256];
    progress_format(line, sizeof line, "download", 0.5, 3, "1 / 2 GiB", 10);
    CHECK_STR_EQ(line, "download  [#####.....]  50%  3 s  1 / 2 GiB");
    progress_format(line, sizeof line, "load", -1, 0, NULL, 0);
    CHECK_STR_EQ(line, "load  0 s");
}

static char *render(bool tty, progress_style style)
{
    const char *path = test_tmp_path("progress-%d-%d.txt", tty, (int)style);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    progress p;
    progress_start_on(&p, f, tty, "loading", style);
    for (int i = 0; i <= 100; i++) progress_update(&p, i / 100.0, "tensors");
    progress_finish(&p, tty ? NULL : "done");
    fclose(f);
    return test_read_file(path, NULL);
}

TEST(download_progress, styles)
{
    /* not a tty, quiet style: nothing at all */
    CHECK_STR_EQ(render(false, PROGRESS_QUIET), "");
    /* not a tty, line style: one line per 10 % step, no carriage returns */
    char *lines = render(false, PROGRESS_LINES);
    CHECK(strchr(lines, '\r') == NULL);
    int n = 0;
    for (char *p = lines; *p; p++) n += *p == '\n';
    CHECK_EQ_INT(n, 12); /* 0 %, 10 % … 100 %, summary */
    CHECK_CONTAINS(lines, "loading 100%");
    CHECK_CONTAINS(lines, "done\n");
    /* a tty: redrawn in place, the line ended once at the finish */
    char *bar = render(true, PROGRESS_QUIET);
    CHECK(bar[0] == '\r');
    CHECK_CONTAINS(bar, "[########################] 100%");
    size_t len = strlen(bar);
    CHECK(len > 0 && bar[len - 1] == '\n');
    CHECK(strchr(bar, '\n') == bar + len - 1);
}
