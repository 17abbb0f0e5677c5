/* json.h: a small JSON reader for tests that check mbctl's --json output. */
#ifndef MB_TEST_JSON_H
#define MB_TEST_JSON_H

#include <stddef.h>

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ };

struct json {
    enum json_type type;
    double num;              /* JSON_NUM, JSON_BOOL */
    char *str;               /* JSON_STR; the key inside an object */
    char *key;
    struct json *kids;       /* JSON_ARR, JSON_OBJ: n kids */
    size_t n;
};

/* NULL when text is not exactly one JSON value. */
struct json *json_parse(const char *text);
void json_free(struct json *j);
const struct json *json_get(const struct json *obj, const char *key);
/* Number at key, or -1 when missing or not a number. */
double json_num(const struct json *obj, const char *key);

#endif
