/* status.c: the text of every mb_status code, shared by library, daemon and
 * tools (the same numbers travel in replies); generated from the table in
 * moonbright/status.h. */
#include <moonbright/status.h>

const char *mb_strerror(int err)
{
    switch (err) {
#define MB_STATUS_TEXT_(name, value, text) case name: return text;
    MB_STATUS_TABLE(MB_STATUS_TEXT_)
#undef MB_STATUS_TEXT_
    default: return "unknown error";
    }
}
