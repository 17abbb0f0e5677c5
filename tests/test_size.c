/* test_size.c: size parsing accepts what people write and rejects junk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "size.h"

static void accepts(void **state)
{
    static const struct { const char *s; uint64_t v; } ok[] = {
        { "0", 0 }, { "4096", 4096 }, { "2M", 2u << 20 }, { "2m", 2u << 20 }, { "64K", 65536 },
        { "1G", 1ull << 30 }, { "1GiB", 1ull << 30 }, { "3MB", 3u << 20 }, { "2T", 2ull << 40 },
        { "512b", 512 }, { "18446744073709551615", UINT64_MAX },
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 7;
        assert_int_equal(mb_parse_size(ok[i].s, &v), 0);
        assert_true(v == ok[i].v);
    }
}

static void rejects(void **state)
{
    static const char *bad[] = { "", "M", "-1", "+5", " 5", "5 ", "1.5G", "12Q", "2MiBx", "0x10",
                                 "18446744073709551616", "17179869184G", "4KK", "1iB", NULL };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 7;
        assert_int_equal(mb_parse_size(bad[i], &v), MB_EINVAL);
        assert_true(v == 7);
    }
}

static void formats(void **state)
{
    char buf[32];
    assert_string_equal(mb_format_size(2u << 20, buf, sizeof(buf)), "2 MiB");
    assert_string_equal(mb_format_size(1536, buf, sizeof(buf)), "1.5 KiB");
    assert_string_equal(mb_format_size(100, buf, sizeof(buf)), "100 B");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(accepts), cmocka_unit_test(rejects), cmocka_unit_test(formats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
