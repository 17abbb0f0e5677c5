/* test_wire.c: protocol messages round-trip through protobuf, junk does not
 * unpack, and the command table agrees with the schema. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <moonbright/mbclient.h>

#include "commands.h"
#include "wire.h"

static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(*len ? *len : 1);
    assert_non_null(buf);
    assert_int_equal(protobuf_c_message_pack(m, buf), *len);
    return buf;
}

static void request_round_trip(void **state)
{
    uint8_t token[16];
    for (int i = 0; i < 16; i++)
        token[i] = (uint8_t)(i * 7 + 1);
    Mb__Request req = MB__REQUEST__INIT;
    Mb__Hello h = MB__HELLO__INIT;
    h.token.data = token;
    h.token.len = sizeof(token);
    h.tenant = "llm-serving";
    h.version = 1;
    req.id = 0x1234567890ull;
    req.body_case = MB__REQUEST__BODY_HELLO;
    req.hello = &h;
    size_t len;
    uint8_t *buf = pack(&req.base, &len);
    Mb__Request *r = mb__request__unpack(NULL, len, buf);
    assert_non_null(r);
    assert_true(r->id == req.id);
    assert_int_equal(r->body_case, MB__REQUEST__BODY_HELLO);
    assert_string_equal(r->hello->tenant, "llm-serving");
    assert_int_equal(r->hello->token.len, 16);
    assert_memory_equal(r->hello->token.data, token, 16);
    mb__request__free_unpacked(r, NULL);
    free(buf);

    Mb__Return ret = MB__RETURN__INIT;
    uint32_t ids[] = { 1, 99, 70000, 4000000000u };
    ret.ids = ids;
    ret.n_ids = 4;
    req.body_case = MB__REQUEST__BODY_RET;
    req.ret = &ret;
    buf = pack(&req.base, &len);
    r = mb__request__unpack(NULL, len, buf);
    assert_non_null(r);
    assert_int_equal(r->ret->n_ids, 4);
    assert_memory_equal(r->ret->ids, ids, sizeof(ids));
    mb__request__free_unpacked(r, NULL);
    free(buf);
}

static void reply_round_trip(void **state)
{
    Mb__Reply rep = MB__REPLY__INIT;
    Mb__GrantReply g = MB__GRANT_REPLY__INIT;
    Mb__Frame f[3], *fp[3];
    for (int i = 0; i < 3; i++) {
        mb__frame__init(&f[i]);
        f[i].id = (uint32_t)(10 + i);
        f[i].bytes = 2u << 20;
        f[i].fd_follows = i != 1;
        fp[i] = &f[i];
    }
    g.frames = fp;
    g.n_frames = 3;
    rep.id = 5;
    rep.body_case = MB__REPLY__BODY_GRANT;
    rep.grant = &g;
    mb_reply_error(&rep, MB_EQUOTA, "quota %d", 42);
    size_t len;
    uint8_t *buf = pack(&rep.base, &len);
    Mb__Reply *r = mb__reply__unpack(NULL, len, buf);
    assert_non_null(r);
    assert_int_equal(r->code, MB_EQUOTA);
    assert_string_equal(r->error, "quota 42");
    assert_int_equal(r->grant->n_frames, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r->grant->frames[i]->id, 10 + i);
        assert_int_equal(r->grant->frames[i]->fd_follows, i != 1);
    }
    mb__reply__free_unpacked(r, NULL);
    free(buf);
}

static void junk_does_not_unpack(void **state)
{
    /* A field with wire type 7 (invalid), a length running past the end, a
     * truncated varint: each must fail cleanly. */
    static const uint8_t junk1[] = { 0x0f, 0x01 };
    static const uint8_t junk2[] = { 0x82, 0x01, 0x7f, 0x01 };
    static const uint8_t junk3[] = { 0x08, 0xff, 0xff };
    assert_null(mb__request__unpack(NULL, sizeof(junk1), junk1));
    assert_null(mb__request__unpack(NULL, sizeof(junk2), junk2));
    assert_null(mb__request__unpack(NULL, sizeof(junk3), junk3));
    /* Random bytes never crash the unpacker. */
    srand(7);
    uint8_t buf[64];
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(rand() % (int)sizeof(buf));
        for (size_t k = 0; k < n; k++)
            buf[k] = (uint8_t)rand();
        Mb__Request *r = mb__request__unpack(NULL, n, buf);
        if (r)
            mb__request__free_unpacked(r, NULL);
    }
}

static void command_table_matches_schema(void **state)
{
    for (int i = 0; i < MB_CMD_COUNT; i++) {
        assert_int_equal(mb_command_by_body(mb_commands[i].body), i);
        assert_int_equal(mb_command_by_name(mb_commands[i].name), i);
        assert_non_null(protobuf_c_message_descriptor_get_field(&mb__request__descriptor,
                                                                (unsigned)mb_commands[i].body));
    }
    assert_int_equal(mb_command_by_body(12345), -1);
    assert_int_equal(mb_command_by_name("nosuch"), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(request_round_trip),
        cmocka_unit_test(reply_round_trip),
        cmocka_unit_test(junk_does_not_unpack),
        cmocka_unit_test(command_table_matches_schema),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
