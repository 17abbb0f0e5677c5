/* bench_check.c: checks one mbbench --json output for the bench smoke
 * tests: the file parses as one JSON value and every key path named on the
 * command line ("rows.0.pair_ns.p50") exists. Values are never judged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static const struct json *walk(const struct json *j, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    char *save = NULL;
    for (char *seg = strtok_r(buf, ".", &save); seg && j; seg = strtok_r(NULL, ".", &save)) {
        if (j->type == JSON_ARR) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            j = *end == 0 && i < j->n ? &j->kids[i] : NULL;
        } else if (j->type == JSON_OBJ) {
            j = json_get(j, seg);
        } else {
            j = NULL;
        }
    }
    return j;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_check FILE [KEY.PATH ...]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap);
    size_t r;
    while (text && (r = fread(text + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *nt = realloc(text, cap *= 2);
            if (!nt) {
                free(text);
                text = NULL;
            }
            text = nt;
        }
    }
    fclose(f);
    if (!text)
        return 1;
    text[n] = 0;
    struct json *j = json_parse(text);
    free(text);
    if (!j) {
        fprintf(stderr, "bench_check: %s is not one JSON value\n", argv[1]);
        return 1;
    }
    int bad = 0;
    for (int i = 2; i < argc; i++)
        if (!walk(j, argv[i])) {
            fprintf(stderr, "bench_check: %s lacks %s\n", argv[1], argv[i]);
            bad = 1;
        }
    json_free(j);
    if (!bad)
        printf("bench_check: %s: parses, %d keys present\n", argv[1], argc - 2);
    return bad;
}
