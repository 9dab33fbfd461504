/* A session's meta.json read from hostile text: values out of range
 * fall back to their defaults instead of being converted unchecked. */
#include <stdio.h>
#include <string.h>

#include "sessions/store_impl.h"
#include "tests/test.h"

static int parse(const char *text, session_meta *m) { return session_meta_parse(text, strlen(text), m); }

TEST(sessions_meta, top_k_out_of_range_is_off)
{
    static const char *const values[] = { "1e300", "-1e300", "99999999999", "-99999999999", "2147483648" };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        char text[256];
        snprintf(text, sizeof text,
                 "{\"id\":\"m\",\"created\":1,\"settings\":{\"sampling\":{\"top_k\":%s,\"top_p\":0.5}}}", values[i]);
        session_meta m;
        CHECK_EQ_INT(parse(text, &m), 0);
        CHECK_EQ_INT(m.info.sampling.top_k, 0);
        CHECK(m.info.sampling.top_p == 0.5f);
    }
    session_meta m;
    CHECK_EQ_INT(parse("{\"id\":\"m\",\"created\":1,\"settings\":{\"sampling\":{\"top_k\":40}}}", &m), 0);
    CHECK_EQ_INT(m.info.sampling.top_k, 40);
    CHECK_EQ_INT(parse("{\"id\":\"m\",\"created\":1,\"settings\":{\"sampling\":{\"top_k\":2147483646.5}}}", &m), 0);
    CHECK_EQ_INT(m.info.sampling.top_k, 2147483646);
}

TEST(sessions_meta, parse_takes_a_length_not_a_terminator)
{
    const char text[] = "{\"id\":\"ab\",\"created\":5}{\"id\":\"zz\"";
    session_meta m;
    CHECK_EQ_INT(session_meta_parse(text, 23, &m), 0);
    CHECK_STR_EQ(m.info.id, "ab");
    CHECK_EQ_INT(m.info.created, 5);
    CHECK_EQ_INT(session_meta_parse(text, 10, &m), -1);
    CHECK_EQ_INT(session_meta_parse("{\"id\":\"..\",\"created\":5}", 23, &m), -1);
}
