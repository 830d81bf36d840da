/*
 * status.c: status codes and the caller-owned error record.
 *
 * Messages come from the one X-macro table in tessera.h, so a new code and
 * its text are added in one place.  tsr_error_set keeps the first error: the
 * deepest failure names the real cause, and callers further up only return.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tessera.h"

static const char *const status_text[] = {
#define TSR_X_TEXT(name, msg) msg,
    TSR_STATUS_LIST(TSR_X_TEXT)
#undef TSR_X_TEXT
};

const char *tsr_strerror(tsr_status s)
{
  if ((int)s < 0 || (int)s >= TSR_STATUS_COUNT)
    return "unknown status";
  return status_text[s];
}

void tsr_error_clear(tsr_error *err)
{
  if (err) {
    err->status = TSR_OK;
    err->text[0] = '\0';
  }
}

tsr_status tsr_error_set(tsr_error *err, tsr_status status, const char *fmt, ...)
{
  if (err && err->status == TSR_OK && status != TSR_OK) {
    va_list ap;
    err->status = status;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
  }
  return status;
}
