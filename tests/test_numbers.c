/* The one number parser of base/: whole strings only, ranges, and
 * messages that name the text. */
#include <stdint.h>
#include <string.h>

#include "base/base.h"
#include "tests/test.h"

TEST(numbers, whole_numbers_are_the_whole_string)
{
    ds4_error err = { "" };
    long v = -7;
    CHECK_EQ_INT(num_parse_long("42", 0, 100, &v, &err), 0);
    CHECK_EQ_INT(v, 42);
    CHECK_EQ_INT(num_parse_long("-3", -5, 5, &v, &err), 0);
    CHECK_EQ_INT(v, -3);
    CHECK_EQ_INT(num_parse_long("+3", -5, 5, &v, &err), 0);
    CHECK_EQ_INT(v, 3);
    v = 99;
    const char *bad[] = { "", " 4", "4 ", "12k", "0x10", "4.0", "-", "abc", "1,2" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_MSG(num_parse_long(bad[i], 0, 1000, &v, &err) == -1, "'%s' was taken", bad[i]);
        CHECK_CONTAINS(err.msg, "is not a whole number");
        CHECK_EQ_INT(v, 99);
    }
    CHECK_EQ_INT(num_parse_long(NULL, 0, 1, &v, NULL), -1);
}

TEST(numbers, ranges_are_checked_and_named)
{
    ds4_error err = { "" };
    int v = 5;
    CHECK_EQ_INT(num_parse_int("0", 1, 100, &v, &err), -1);
    CHECK_STR_EQ(err.msg, "'0' is not in 1..100");
    CHECK_EQ_INT(num_parse_int("101", 1, 100, &v, &err), -1);
    CHECK_EQ_INT(num_parse_int("99999999999999999999", 1, 100, &v, &err), -1);
    CHECK_CONTAINS(err.msg, "is not in 1..100");
    CHECK_EQ_INT(v, 5);
    CHECK_EQ_INT(num_parse_int("100", 1, 100, &v, &err), 0);
    CHECK_EQ_INT(v, 100);
}

TEST(numbers, unsigned_refuses_what_strtoull_wraps)
{
    ds4_error err = { "" };
    uint64_t v = 0;
    CHECK_EQ_INT(num_parse_u64("18446744073709551615", 0, UINT64_MAX, &v, &err), 0);
    CHECK(v == UINT64_MAX);
    CHECK_EQ_INT(num_parse_u64("-1", 0, UINT64_MAX, &v, &err), -1);
    CHECK_CONTAINS(err.msg, "is not in 0..18446744073709551615");
    CHECK_EQ_INT(num_parse_u64("18446744073709551616", 0, UINT64_MAX, &v, &err), -1);
    CHECK_EQ_INT(num_parse_u64(" 1", 0, 9, &v, &err), -1);
    CHECK_EQ_INT(num_parse_u64("1x", 0, 9, &v, &err), -1);
}

TEST(numbers, fractions_and_their_limits)
{
    ds4_error err = { "" };
    double v = 0;
    CHECK_EQ_INT(num_parse_double("0.25", 0, 1, &v, &err), 0);
    CHECK_NEAR(v, 0.25, 0);
    CHECK_EQ_INT(num_parse_double("1e-1", 0, 1, &v, &err), 0);
    CHECK_NEAR(v, 0.1, 1e-12);
    CHECK_EQ_INT(num_parse_double(".5", 0, 1, &v, &err), 0);
    const char *bad[] = { "", "nan", "inf", "-inf", " 0.5", "0.5 ", "0.5s", "." };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(num_parse_double(bad[i], -1e300, 1e300, &v, &err) == -1, "'%s' was taken", bad[i]);
    CHECK_EQ_INT(num_parse_double("1.5", 0, 1, &v, &err), -1);
    CHECK_STR_EQ(err.msg, "'1.5' is not in 0..1");
}

TEST(numbers, sizes_take_units)
{
    ds4_error err = { "" };
    uint64_t v = 0;
    CHECK_EQ_INT(num_parse_size("123", &v, &err), 0);
    CHECK(v == 123);
    CHECK_EQ_INT(num_parse_size("64G", &v, &err), 0);
    CHECK(v == 64ull << 30);
    CHECK_EQ_INT(num_parse_size("1.5T", &v, &err), 0);
    CHECK(v == 3ull << 39);
    CHECK_EQ_INT(num_parse_size("512MiB", &v, &err), 0);
    CHECK(v == 512ull << 20);
    CHECK_EQ_INT(num_parse_size("8 kB", &v, &err), 0);
    CHECK(v == 8192);
    const char *bad[] = { "", "lots", "12Q", "-5", "5G extra", "20E", "99999999P" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(num_parse_size(bad[i], &v, &err) == -1, "'%s' was taken", bad[i]);
}

TEST(numbers, lists_are_items_of_the_same_rule)
{
    ds4_error err = { "" };
    long v[4] = { 0 };
    CHECK_EQ_INT(num_parse_list("3,1", 1, 10, v, 4, &err), 2);
    CHECK_EQ_INT(v[0], 3);
    CHECK_EQ_INT(v[1], 1);
    CHECK_EQ_INT(num_parse_list("7", 1, 10, v, 4, &err), 1);
    CHECK_EQ_INT(num_parse_list("", 1, 10, v, 4, &err), -1);
    CHECK_EQ_INT(num_parse_list("1,,2", 1, 10, v, 4, &err), -1);
    CHECK_EQ_INT(num_parse_list("1,2,", 1, 10, v, 4, &err), -1);
    CHECK_EQ_INT(num_parse_list("1, 2", 1, 10, v, 4, &err), -1);
    CHECK_EQ_INT(num_parse_list("1,11", 1, 10, v, 4, &err), -1);
    CHECK_STR_EQ(err.msg, "'11' is not in 1..10");
    CHECK_EQ_INT(num_parse_list("1,2,3,4,5", 1, 10, v, 4, &err), -1);
    CHECK_CONTAINS(err.msg, "more than 4 items");
}
