/*
 * check_files.c: the files module (runtime/files.h) -- output transactions
 * and input checks.
 *
 * Every output test writes fresh random bytes and reads the result back
 * with plain stdio, so what is checked is the file system, not the module's
 * own view of it: a link is still a link and its target holds the bytes; a
 * FIFO is still a FIFO and its reader got the bytes; a folder or a file that
 * existed before a failure is byte for byte what it was, and no temporary
 * is left anywhere in the scratch folder.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

#include "files.h"
#include "util.h"

static char dir[256];
static uint64_t base_seed;

static void setup(void)
{
  tu_tmpdir(dir, sizeof dir);
}

static void teardown(void)
{
  tu_rmtree(dir);
}

static const char *at(const char *name)
{
  static char buf[4][600];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

/* n random bytes (never all equal), malloc'ed. */
static unsigned char *rand_bytes(tu_rng *r, size_t n)
{
  unsigned char *b = malloc(n);
  size_t i;
  for (i = 0; i < n; i++)
    b[i] = (unsigned char)tu_next(r);
  return b;
}

static void put(const char *path, const void *data, size_t n)
{
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

/* The file's bytes equal data[0..n). */
static int same(const char *path, const void *data, size_t n)
{
  FILE *f = fopen(path, "rb");
  unsigned char *got;
  size_t k;
  int ok;
  if (!f)
    return 0;
  got = malloc(n + 1);
  k = fread(got, 1, n + 1, f);
  fclose(f);
  ok = k == n && memcmp(got, data, n) == 0;
  free(got);
  return ok;
}

/* Entries of folder d whose name contains `part` (".tmp.", ".old."). */
static int count_named(const char *d, const char *part)
{
  DIR *dd = opendir(d);
  struct dirent *e;
  int n = 0;
  while (dd && (e = readdir(dd)))
    n += strstr(e->d_name, part) != NULL;
  if (dd)
    closedir(dd);
  return n;
}

static void no_leftovers(void)
{
  ck_assert_int_eq(count_named(dir, ".tmp."), 0);
  ck_assert_int_eq(count_named(dir, ".old."), 0);
}

static mode_t lmode(const char *path)
{
  struct stat sb;
  ck_assert_int_eq(lstat(path, &sb), 0);
  return sb.st_mode;
}

/* ---- links ------------------------------------------------------------- */

/* out -> sub/l2 -> real (relative links, a chain): the links stay, the
 * final target receives the bytes; a dangling link creates its target. */
START_TEST(test_write_through_links)
{
  tu_rng r = {base_seed + 1 + (uint64_t)_i};
  size_t n = (size_t)tu_range(&r, 1, 70000);
  unsigned char *old = rand_bytes(&r, 100), *data = rand_bytes(&r, n);
  tsr_error err = {0};
  ck_assert_int_eq(mkdir(at("sub"), 0777), 0);
  put(at("sub/real"), old, 100);
  ck_assert_int_eq(chmod(at("sub/real"), 0640), 0);
  ck_assert_int_eq(symlink("real", at("sub/l2")), 0);
  ck_assert_int_eq(symlink("sub/l2", at("out")), 0);
  ck_assert_int_eq(tsri_out_write(at("out"), data, n, &err), TSR_OK);
  ck_assert(S_ISLNK(lmode(at("out"))));
  ck_assert(S_ISLNK(lmode(at("sub/l2"))));
  ck_assert(S_ISREG(lmode(at("sub/real"))));
  ck_assert_int_eq(lmode(at("sub/real")) & 07777, 0640); /* permissions kept */
  ck_assert(same(at("sub/real"), data, n));
  ck_assert_int_eq(count_named(at("sub"), ".tmp."), 0);
  no_leftovers();
  /* dangling: the link's target is created, the link kept */
  ck_assert_int_eq(symlink("sub/new", at("dangling")), 0);
  ck_assert_int_eq(tsri_out_write(at("dangling"), old, 100, &err), TSR_OK);
  ck_assert(S_ISLNK(lmode(at("dangling"))));
  ck_assert(same(at("sub/new"), old, 100));
  free(old);
  free(data);
}
END_TEST

/* ---- devices and FIFOs ------------------------------------------------- */

START_TEST(test_fifo_written_directly)
{
  tu_rng r = {base_seed + 2 + (uint64_t)_i};
  size_t n = (size_t)tu_range(&r, 1, 300000); /* more than a pipe holds */
  unsigned char *data = rand_bytes(&r, n);
  tsr_error err = {0};
  int status;
  pid_t pid;
  ck_assert_int_eq(mkfifo(at("fifo"), 0666), 0);
  ck_assert_int_eq(symlink("fifo", at("link")), 0);
  pid = tu_fifo_reader(at("fifo"), at("copy"));
  ck_assert_int_gt(pid, 0);
  /* through a link to it, half of the runs */
  ck_assert_int_eq(tsri_out_write(at(_i % 2 ? "link" : "fifo"), data, n, &err), TSR_OK);
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ck_assert(S_ISFIFO(lmode(at("fifo"))));
  ck_assert(S_ISLNK(lmode(at("link"))));
  ck_assert(same(at("copy"), data, n));
  no_leftovers();
  free(data);
}
END_TEST

/* /dev/null is a character device: written, never replaced. */
START_TEST(test_char_device)
{
  tu_rng r = {base_seed + 3};
  unsigned char *data = rand_bytes(&r, 999);
  tsr_error err = {0};
  struct stat before, after;
  ck_assert_int_eq(stat("/dev/null", &before), 0);
  ck_assert(S_ISCHR(before.st_mode));
  ck_assert_int_eq(tsri_out_write("/dev/null", data, 999, &err), TSR_OK);
  ck_assert_int_eq(stat("/dev/null", &after), 0);
  ck_assert(S_ISCHR(after.st_mode));
  ck_assert_int_eq(before.st_ino, after.st_ino);
  ck_assert_int_eq(before.st_rdev, after.st_rdev);
  free(data);
}
END_TEST

/* A file the process has open, named through /proc (/dev/stdout after
 * "> f" or ">> f"): written where that open file writes, appended to it,
 * never replaced by a new file. */
START_TEST(test_proc_fd_appends)
{
  tu_rng r = {base_seed + 11};
  unsigned char *head = rand_bytes(&r, 50), *data = rand_bytes(&r, 5000), *both;
  char name[64];
  struct stat before, after;
  tsr_error err = {0};
  int fd;
  put(at("log"), head, 50);
  fd = open(at("log"), O_WRONLY | O_APPEND);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(fstat(fd, &before), 0);
  snprintf(name, sizeof name, "/proc/self/fd/%d", fd);
  ck_assert_int_eq(tsri_out_write(name, data, 5000, &err), TSR_OK);
  close(fd);
  ck_assert_int_eq(stat(at("log"), &after), 0);
  ck_assert_int_eq(before.st_ino, after.st_ino);
  both = malloc(5050);
  memcpy(both, head, 50);
  memcpy(both + 50, data, 5000);
  ck_assert(same(at("log"), both, 5050));
  no_leftovers();
  free(head), free(data), free(both);
}
END_TEST

/* ---- refused targets ----------------------------------------------------- */

START_TEST(test_directory_refused)
{
  tu_rng r = {base_seed + 4};
  unsigned char *data = rand_bytes(&r, 500), *inside = rand_bytes(&r, 64);
  tsr_error err = {0};
  ck_assert_int_eq(mkdir(at("d"), 0777), 0);
  put(at("d/keep"), inside, 64);
  ck_assert_int_eq(symlink("d", at("ld")), 0);
  ck_assert_int_eq(tsri_out_write(at("d"), data, 500, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, at("d")) && strstr(err.text, "a directory, not a regular file"),
                "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_out_write(at("ld"), data, 500, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "a link to") && strstr(err.text, "a directory"), "%s", err.text);
  ck_assert(S_ISDIR(lmode(at("d"))));
  ck_assert(S_ISLNK(lmode(at("ld"))));
  ck_assert(same(at("d/keep"), inside, 64));
  ck_assert_int_eq(count_named(at("d"), ".tmp."), 0);
  no_leftovers();
  /* a writer that needs a path (SQLite) takes no FIFO; a refused add
   * leaves the transaction usable and its stream NULL */
  {
    tsr_out *t;
    FILE *f;
    ck_assert_int_eq(mkfifo(at("p"), 0666), 0);
    ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
    tsr_error_clear(&err);
    {
      const char *tmp;
      ck_assert_int_eq(tsri_out_path(t, at("p"), 0, &tmp, &err), TSR_ERR_IO);
      ck_assert_msg(strstr(err.text, "a FIFO, not a regular file"), "%s", err.text);
    }
    tsr_error_clear(&err);
    ck_assert_int_eq(tsri_out_file(t, at("d"), 0, &f, &err), TSR_ERR_IO);
    ck_assert_ptr_null(f);
    tsri_out_abort(t);
  }
  ck_assert(S_ISFIFO(lmode(at("p"))));
  free(data);
  free(inside);
}
END_TEST

START_TEST(test_new_only_and_same_file)
{
  tu_rng r = {base_seed + 5};
  unsigned char *a = rand_bytes(&r, 300), *b = rand_bytes(&r, 200);
  tsr_out *t;
  FILE *f1, *f2;
  tsr_error err = {0};
  put(at("x"), a, 300);
  ck_assert_int_eq(symlink("x", at("lx")), 0);
  /* TSR_OUT_NEW: an existing file (here through a link) is refused */
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("lx"), TSR_OUT_NEW, &f1, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "file exists"), "%s", err.text);
  tsri_out_abort(t);
  /* two outputs naming one file (a link and its target, an absent file
   * spelled twice) are refused before anything is written */
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("x"), 0, &f1, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("lx"), 0, &f2, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, "names the same file"), "%s", err.text);
  tsri_out_abort(t);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("y"), 0, &f1, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("./y"), 0, &f2, &err), TSR_ERR_INVALID);
  tsri_out_abort(t);
  ck_assert(same(at("x"), a, 300));
  ck_assert_int_eq(access(at("y"), F_OK), -1);
  no_leftovers();
  free(a);
  free(b);
}
END_TEST

/* ---- all or nothing --------------------------------------------------------- */

/* The second output cannot be made (its folder is missing): the first,
 * which existed, stays byte for byte; nothing is left behind. */
START_TEST(test_failed_add_keeps_existing)
{
  tu_rng r = {base_seed + 6 + (uint64_t)_i};
  size_t n = (size_t)tu_range(&r, 1, 5000);
  unsigned char *old = rand_bytes(&r, n), *neu = rand_bytes(&r, n + 7);
  tsr_out *t;
  FILE *f1, *f2;
  tsr_error err = {0};
  put(at("out.npy"), old, n);
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("out.npy"), 0, &f1, &err), TSR_OK);
  ck_assert_uint_eq(fwrite(neu, 1, n + 7, f1), n + 7);
  ck_assert_int_eq(tsri_out_file(t, at("nodir/lse.npy"), 0, &f2, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "nodir/lse.npy") && strstr(err.text, "No such file"), "%s",
                err.text);
  tsri_out_abort(t);
  ck_assert(same(at("out.npy"), old, n));
  no_leftovers();
  free(old);
  free(neu);
}
END_TEST

/* Commit fails half-way: after the first output is renamed onto its file,
 * the second cannot be (its target became a folder): the first file is
 * put back as it was, the new file of the third never appears. */
START_TEST(test_failed_rename_is_undone)
{
  tu_rng r = {base_seed + 7 + (uint64_t)_i};
  unsigned char *a0 = rand_bytes(&r, 1000), *b0 = rand_bytes(&r, 900), *a1 = rand_bytes(&r, 800),
                *b1 = rand_bytes(&r, 700), *c1 = rand_bytes(&r, 600);
  tsr_out *t;
  FILE *fa, *fb, *fc;
  tsr_error err = {0};
  put(at("a"), a0, 1000);
  put(at("b"), b0, 900);
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("a"), 0, &fa, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("b"), 0, &fb, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("c"), 0, &fc, &err), TSR_OK);
  fwrite(a1, 1, 800, fa);
  fwrite(b1, 1, 700, fb);
  fwrite(c1, 1, 600, fc);
  /* someone puts a folder with content where b was */
  ck_assert_int_eq(rename(at("b"), at("b.saved")), 0);
  ck_assert_int_eq(mkdir(at("b"), 0777), 0);
  put(at("b/inside"), b1, 700);
  ck_assert_int_eq(tsri_out_commit(t, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, at("b")), "%s", err.text);
  ck_assert(same(at("a"), a0, 1000));
  ck_assert(same(at("b/inside"), b1, 700));
  ck_assert_int_eq(access(at("c"), F_OK), -1);
  ck_assert(same(at("b.saved"), b0, 900));
  no_leftovers();
  free(a0), free(b0), free(a1), free(b1), free(c1);
}
END_TEST

/* A write error seen at commit (here: a stream already in error) renames
 * nothing. */
START_TEST(test_stream_error_renames_nothing)
{
  tu_rng r = {base_seed + 8};
  unsigned char *a0 = rand_bytes(&r, 100), *a1 = rand_bytes(&r, 100);
  tsr_out *t;
  FILE *fa, *fb;
  tsr_error err = {0};
  put(at("a"), a0, 100);
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("a"), 0, &fa, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_file(t, at("b"), 0, &fb, &err), TSR_OK);
  fwrite(a1, 1, 100, fa);
  fgetc(fb); /* reading a write-only stream sets its error flag */
  ck_assert(ferror(fb));
  ck_assert_int_eq(tsri_out_commit(t, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, at("b")), "%s", err.text);
  ck_assert(same(at("a"), a0, 100));
  ck_assert_int_eq(access(at("b"), F_OK), -1);
  no_leftovers();
  free(a0), free(a1);
}
END_TEST

/* ---- folders ------------------------------------------------------------- */

static int always(const char *d, void *ud)
{
  (void)d;
  ++*(int *)ud;
  return 1;
}

START_TEST(test_folders)
{
  tu_rng r = {base_seed + 9};
  unsigned char *x = rand_bytes(&r, 321), *y = rand_bytes(&r, 123);
  const char *work;
  char path[700];
  tsr_out *t;
  tsr_error err = {0};
  int calls = 0;
  /* new: built aside, appears complete at commit */
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_dir(t, at("new"), NULL, NULL, &work, &err), TSR_OK);
  snprintf(path, sizeof path, "%s/f", work);
  put(path, x, 321);
  ck_assert_int_eq(access(at("new"), F_OK), -1);
  ck_assert_int_eq(tsri_out_commit(t, &err), TSR_OK);
  ck_assert(same(at("new/f"), x, 321));
  /* aborted: no folder */
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_dir(t, at("gone"), NULL, NULL, &work, &err), TSR_OK);
  snprintf(path, sizeof path, "%s/f", work);
  put(path, x, 321);
  tsri_out_abort(t);
  ck_assert_int_eq(access(at("gone"), F_OK), -1);
  no_leftovers();
  /* an existing empty folder, through a link: replaced, the link kept */
  ck_assert_int_eq(mkdir(at("empty"), 0750), 0);
  ck_assert_int_eq(symlink("empty", at("lempty")), 0);
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_dir(t, at("lempty"), NULL, NULL, &work, &err), TSR_OK);
  snprintf(path, sizeof path, "%s/f", work);
  put(path, y, 123);
  ck_assert_int_eq(tsri_out_commit(t, &err), TSR_OK);
  ck_assert(S_ISLNK(lmode(at("lempty"))));
  ck_assert_int_eq(lmode(at("empty")) & 07777, 0750);
  ck_assert(same(at("empty/f"), y, 123));
  /* not empty, not replaceable: refused, untouched */
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_dir(t, at("new"), NULL, NULL, &work, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "not empty"), "%s", err.text);
  tsri_out_abort(t);
  ck_assert(same(at("new/f"), x, 321));
  /* a file where a folder goes: refused */
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_dir(t, at("new/f"), NULL, NULL, &work, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "a regular file, not a folder"), "%s", err.text);
  tsri_out_abort(t);
  /* replaceable (a previous report, say): replaced as a whole at commit,
   * kept as it was on abort */
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_dir(t, at("new"), always, &calls, &work, &err), TSR_OK);
  ck_assert_int_eq(calls, 1);
  snprintf(path, sizeof path, "%s/g", work);
  put(path, y, 123);
  tsri_out_abort(t);
  ck_assert(same(at("new/f"), x, 321));
  ck_assert_int_eq(tsri_out_begin(&t, &err), TSR_OK);
  ck_assert_int_eq(tsri_out_dir(t, at("new"), always, &calls, &work, &err), TSR_OK);
  snprintf(path, sizeof path, "%s/g", work);
  put(path, y, 123);
  ck_assert_int_eq(tsri_out_commit(t, &err), TSR_OK);
  ck_assert_int_eq(access(at("new/f"), F_OK), -1);
  ck_assert(same(at("new/g"), y, 123));
  no_leftovers();
  free(x), free(y);
}
END_TEST

/* ---- inputs ---------------------------------------------------------------- */

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

START_TEST(test_inputs)
{
  tu_rng r = {base_seed + 10};
  unsigned char *x = rand_bytes(&r, 77);
  tsr_error err = {0};
  char want[800];
  FILE *f;
  double t0;
  put(at("reg"), x, 77);
  ck_assert_int_eq(symlink("reg", at("lreg")), 0);
  ck_assert_int_eq(mkfifo(at("fifo"), 0666), 0);
  ck_assert_int_eq(symlink("fifo", at("lfifo")), 0);
  ck_assert_int_eq(mkdir(at("d"), 0777), 0);
  ck_assert_int_eq(tsri_in_check(at("reg"), NULL, &err), TSR_OK);
  ck_assert_int_eq(tsri_in_check(at("lreg"), NULL, &err), TSR_OK);
  f = tsri_in_open(at("lreg"), NULL, &err);
  ck_assert_ptr_nonnull(f);
  {
    unsigned char got[80];
    ck_assert_uint_eq(fread(got, 1, 80, f), 77);
    ck_assert_int_eq(memcmp(got, x, 77), 0);
  }
  fclose(f);
  /* nothing writes these FIFOs: an open that waited would never return */
  t0 = now_s();
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_in_check(at("fifo"), "cannot read mask", &err), TSR_ERR_IO);
  snprintf(want, sizeof want, "cannot read mask '%s': a FIFO, not a regular file", at("fifo"));
  ck_assert_str_eq(err.text, want);
  tsr_error_clear(&err);
  ck_assert_ptr_null(tsri_in_open(at("lfifo"), NULL, &err));
  snprintf(want, sizeof want, "cannot read '%s': a FIFO, not a regular file", at("lfifo"));
  ck_assert_str_eq(err.text, want);
  ck_assert_msg(now_s() - t0 < 1.0, "refusing the FIFOs took %.3f s", now_s() - t0);
  /* a folder, a character device, a missing file */
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_in_check(at("d"), NULL, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "a directory, not a regular file"), "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_ptr_null(tsri_in_open("/dev/zero", NULL, &err));
  ck_assert_msg(strstr(err.text, "'/dev/zero': a character device"), "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_in_check(at("missing"), "cannot open lookup database", &err), TSR_ERR_IO);
  snprintf(want, sizeof want, "cannot open lookup database '%s': %s", at("missing"),
           strerror(ENOENT));
  ck_assert_str_eq(err.text, want);
  free(x);
}
END_TEST

static Suite *files_suite(void)
{
  Suite *s = suite_create("files");
  TCase *tc = tcase_create("files");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 20);
  tcase_add_loop_test(tc, test_write_through_links, 0, 4);
  tcase_add_loop_test(tc, test_fifo_written_directly, 0, 3);
  tcase_add_test(tc, test_char_device);
  tcase_add_test(tc, test_proc_fd_appends);
  tcase_add_test(tc, test_directory_refused);
  tcase_add_test(tc, test_new_only_and_same_file);
  tcase_add_loop_test(tc, test_failed_add_keeps_existing, 0, 4);
  tcase_add_loop_test(tc, test_failed_rename_is_undone, 0, 2);
  tcase_add_test(tc, test_stream_error_renames_nothing);
  tcase_add_test(tc, test_folders);
  tcase_add_test(tc, test_inputs);
  suite_add_tcase(s, tc);
  return s;
}

int main(void)
{
  base_seed = tu_seed("files", 1414);
  return tu_run_suite(files_suite());
}
