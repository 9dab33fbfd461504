/* How the agent streams a reply to a front end: text and reasoning are
 * published once per token, however eagerly the front end reads them. */
#include <string.h>

#include "tests/agent_util.h"
#include "tests/test.h"

/* A front end that reads events as fast as it can, counting the text and
 * reasoning events, until the turn ends. */
static int eager_stream_events(agent *a, strbuf *text)
{
    int n_stream = 0;
    bool ended = false;
    double t0 = test_now_ms();
    while (!ended) {
        CHECK_MSG(test_now_ms() - t0 < 20000, "the turn did not end");
        agent_event *ev;
        size_t n = agent_drain(a, &ev);
        for (size_t i = 0; i < n; i++) {
            if (ev[i].type == AGENT_EV_TEXT || ev[i].type == AGENT_EV_THINKING) n_stream++;
            if (ev[i].type == AGENT_EV_TEXT) sb_append(text, ev[i].text, ev[i].len);
            if (ev[i].type == AGENT_EV_TURN_END) ended = true;
        }
        agent_events_free(ev, n);
    }
    return n_stream;
}

TEST(agent_stream, one_event_per_token_however_fast_it_is_read)
{
    strbuf reply = { 0 };
    sb_puts(&reply, "Thinking about it.</think>");
    for (int i = 0; i < 40; i++) sb_puts(&reply, "several longish wordings, ");
    /* a token a millisecond, as from a real engine */
    const char *lines[] = { script_line(sb_str(&reply), "\"delay_ms\": 1"), NULL };
    agent_config cfg = test_config(script_engine(write_script(lines)), 32768);
    agent *a = test_agent(&cfg);
    wait_idle(a, NULL, 10000);
    CHECK_EQ_INT(agent_submit(a, "go"), 0);
    strbuf text = { 0 };
    int events = eager_stream_events(a, &text);
    agent_status st;
    agent_get_status(a, &st);
    CHECK_MSG(events <= st.generated, "%d events for %d tokens", events, st.generated);
    const char *answer = strstr(sb_str(&reply), "</think>") + 8;
    size_t alen = strlen(answer);
    while (alen && answer[alen - 1] == ' ') alen--;
    CHECK_MSG(text.len == alen && !memcmp(text.s, answer, alen), "%s", sb_str(&text));
    agent_stop(a);
    sb_free(&text);
    sb_free(&reply);
}

TEST(agent_stream, text_events_are_valid_utf8_whatever_the_model_wrote)
{
    /* a byte that is no character, a whole one over two tokens, and one the
     * reply leaves unfinished */
    const char *lines[] = { script_line("ok</think>bad \xfd caf\xc3\xa9 cut \xf0\x9f", NULL), NULL };
    agent_config cfg = test_config(script_engine(write_script(lines)), 32768);
    agent *a = test_agent(&cfg);
    wait_idle(a, NULL, 10000);
    CHECK_EQ_INT(agent_submit(a, "go"), 0);
    strbuf text = { 0 };
    eager_stream_events(a, &text);
    CHECK_STR_EQ(sb_str(&text), "bad \xef\xbf\xbd caf\xc3\xa9 cut \xef\xbf\xbd\xef\xbf\xbd");
    agent_stop(a);
    sb_free(&text);
}
