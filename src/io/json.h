/* A small streaming JSON writer for reports and traces. */
#ifndef SP_JSON_H
#define SP_JSON_H

#include "error.h"

typedef struct sp_json sp_json_t;

sp_json_t *sp_json_new(void);
void sp_json_free(sp_json_t **j);

void sp_json_begin_object(sp_json_t *j);
void sp_json_end_object(sp_json_t *j);
void sp_json_begin_array(sp_json_t *j);
void sp_json_end_array(sp_json_t *j);
void sp_json_key(sp_json_t *j, const char *key);
/* Strings are bytes: control characters are escaped and each byte that is
 * not part of well-formed UTF-8 is written as U+FFFD ("\ufffd"), so the
 * text stays valid UTF-8 (a file name of any bytes cannot break it). */
void sp_json_str(sp_json_t *j, const char *s);
void sp_json_num(sp_json_t *j, double x); /* non-finite values are written as null */
void sp_json_int(sp_json_t *j, long long x);
void sp_json_raw(sp_json_t *j, const char *text); /* already valid JSON */
/* Appends the elements of a JSON array text ("[a,b]") to the current array. */
void sp_json_raw_elements(sp_json_t *j, const char *array);
void sp_json_kv_str(sp_json_t *j, const char *key, const char *s);
void sp_json_kv_num(sp_json_t *j, const char *key, double x);
void sp_json_kv_int(sp_json_t *j, const char *key, long long x);

/* The text written so far (valid JSON once every begin has its end), or
 * NULL if an allocation failed along the way. */
const char *sp_json_text(const sp_json_t *j);

/* Writes the text to path atomically (temporary name, then rename). */
int sp_json_write_file(const sp_json_t *j, const char *path, sp_err_t *err);

#endif /* SP_JSON_H */
