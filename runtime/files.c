/*
 * files.c: checked inputs and all-or-nothing outputs (see files.h).
 *
 * A transaction is an array of entries, one per output, in the order they
 * were added.  Adding an entry looks at what the path names now and decides
 * how it will be written:
 *
 *   absent or a regular file   a temporary beside the target, renamed onto it
 *                              at commit (through any symbolic links: the
 *                              temporary goes beside the file the links lead
 *                              to, so the links themselves stay);
 *   a character device, FIFO   opened and written directly: there is nothing
 *                              to rename, and replacing /dev/stdout with a
 *                              regular file is what must never happen;
 *   an open file, by /proc     what /dev/stdout names after "> f" or ">> f"
 *                              (a link through /proc/self/fd): appended to,
 *                              as the shell's descriptor would, not replaced;
 *   a folder (tsri_out_dir)     a temporary folder beside it, renamed onto it;
 *   anything else              refused, naming the path and what it is.
 *
 * Commit closes every stream first, so a short write anywhere is seen before
 * any target changes; then it renames in order.  An existing target is kept
 * under a second name (a hard link, or the old folder renamed aside) until
 * every rename has succeeded, so a rename that fails half-way can put back
 * what the earlier ones replaced.  Temporaries are named
 * TARGET.tmp.PID.SALT (folders and files alike) and created with O_EXCL or
 * mkdir, so two writers never share one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "files.h"

const char *tsri_file_kind(mode_t m)
{
  if (S_ISREG(m))
    return "a regular file";
  if (S_ISDIR(m))
    return "a directory";
  if (S_ISFIFO(m))
    return "a FIFO";
  if (S_ISCHR(m))
    return "a character device";
  if (S_ISBLK(m))
    return "a block device";
  if (S_ISSOCK(m))
    return "a socket";
  if (S_ISLNK(m))
    return "a symbolic link";
  return "an unknown kind of file";
}

int tsri_file_dir_empty(const char *dir)
{
  DIR *d = opendir(dir);
  struct dirent *e;
  int empty = 1;
  if (!d)
    return -1;
  while (empty && (e = readdir(d)))
    empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
  closedir(d);
  return empty;
}

/* ---- inputs ------------------------------------------------------------ */

tsr_status tsri_in_check(const char *path, const char *what, tsr_error *err)
{
  struct stat sb;
  if (!what)
    what = "cannot read";
  if (!path)
    return tsr_error_set(err, TSR_ERR_INVALID, "%s: no path given", what);
  if (stat(path, &sb) != 0)
    return tsr_error_set(err, TSR_ERR_IO, "%s '%s': %s", what, path, strerror(errno));
  if (!S_ISREG(sb.st_mode))
    return tsr_error_set(err, TSR_ERR_IO, "%s '%s': %s, not a regular file", what, path,
                         tsri_file_kind(sb.st_mode));
  return TSR_OK;
}

FILE *tsri_in_open(const char *path, const char *what, tsr_error *err)
{
  struct stat sb;
  FILE *f;
  int fd, fl;
  if (tsri_in_check(path, what, err) != TSR_OK)
    return NULL;
  if (!what)
    what = "cannot read";
  /* O_NONBLOCK: a path swapped for a FIFO since the check opens at once
   * instead of waiting for a writer, and fstat refuses it below. */
  fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    tsr_error_set(err, TSR_ERR_IO, "%s '%s': %s", what, path, strerror(errno));
    return NULL;
  }
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    tsr_error_set(err, TSR_ERR_IO, "%s '%s': %s, not a regular file", what, path,
                  tsri_file_kind(fstat(fd, &sb) == 0 ? sb.st_mode : 0));
    close(fd);
    return NULL;
  }
  if ((fl = fcntl(fd, F_GETFL)) >= 0)
    fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (!(f = fdopen(fd, "rb"))) {
    tsr_error_set(err, TSR_ERR_NOMEM, "%s '%s': %s", what, path, strerror(errno));
    close(fd);
  }
  return f;
}

/* ---- outputs: paths ---------------------------------------------------- */

/* A copy of p without trailing slashes ("/" stays). */
static char *strip_copy(const char *p, size_t n)
{
  char *s = malloc(n + 1);
  if (!s)
    return NULL;
  memcpy(s, p, n);
  s[n] = '\0';
  while (n > 1 && s[n - 1] == '/')
    s[--n] = '\0';
  return s;
}

/* Follows the symbolic links from path to what they finally name: *out
 * (malloc'ed) and, when it exists (*exists = 1), its lstat in *sb.  A
 * relative link is taken from the folder of the link.  *proc_fd (may be
 * NULL) tells whether a link under /proc was followed (/dev/stdout ->
 * /proc/self/fd/1): what it names is a file the process has open.  -1
 * with errno. */
static int resolve(const char *path, char **out, struct stat *sb, int *exists, int *proc_fd)
{
  char *p = strip_copy(path, strlen(path)), buf[PATH_MAX];
  int hops;
  *out = NULL;
  if (proc_fd)
    *proc_fd = 0;
  for (hops = 0; p; hops++) {
    ssize_t n;
    char *slash, *next;
    if (lstat(p, sb) != 0) {
      if (errno != ENOENT)
        break;
      *exists = 0;
      *out = p;
      return 0;
    }
    if (!S_ISLNK(sb->st_mode)) {
      *exists = 1;
      *out = p;
      return 0;
    }
    if (hops == 40) {
      errno = ELOOP;
      break;
    }
    if ((n = readlink(p, buf, sizeof buf - 1)) < 0)
      break;
    if (proc_fd && !strncmp(p, "/proc/", 6))
      *proc_fd = 1;
    buf[n] = '\0';
    slash = strrchr(p, '/');
    if (buf[0] == '/' || !slash) {
      next = strip_copy(buf, (size_t)n);
    } else {
      size_t d = (size_t)(slash - p) + 1;
      next = malloc(d + (size_t)n + 1);
      if (next) {
        memcpy(next, p, d);
        memcpy(next + d, buf, (size_t)n + 1);
        next[d + (size_t)n] = '\0';
        while (strlen(next) > 1 && next[strlen(next) - 1] == '/')
          next[strlen(next) - 1] = '\0';
      }
    }
    free(p);
    p = next;
  }
  if (!p)
    errno = ENOMEM;
  free(p);
  return -1;
}

/* TARGET.TAG.PID.SALT; attempt varies the salt. */
static char *side_name(const char *target, const char *tag, unsigned attempt)
{
  struct timespec ts;
  size_t n = strlen(target) + strlen(tag) + 48;
  char *s = malloc(n);
  uintptr_t salt;
  if (!s)
    return NULL;
  clock_gettime(CLOCK_REALTIME, &ts);
  /* the clock, a stack address (differs per thread) and the attempt */
  salt = (uintptr_t)ts.tv_nsec ^ ((uintptr_t)&ts >> 4) ^ ((uintptr_t)attempt * 0x9e3779b1u);
  snprintf(s, n, "%s.%s.%ld.%lx", target, tag, (long)getpid(), (unsigned long)(salt & 0xffffffu));
  return s;
}

/* Creates a unique file (dir = 0) or folder beside target; its name in
 * *name.  Returns the open descriptor (files), 0 (folders) or -1. */
static int make_side(const char *target, const char *tag, int dir, char **name)
{
  unsigned attempt;
  for (attempt = 0; attempt < 100; attempt++) {
    int fd;
    if (!(*name = side_name(target, tag, attempt))) {
      errno = ENOMEM;
      return -1;
    }
    fd = dir ? mkdir(*name, 0777) : open(*name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0)
      return fd;
    free(*name);
    *name = NULL;
    if (errno != EEXIST)
      return -1;
  }
  errno = EEXIST;
  return -1;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
  (void)sb, (void)flag, (void)ftw;
  remove(p);
  return 0;
}

static void remove_tree(const char *dir)
{
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- outputs: transactions --------------------------------------------- */

enum { E_FILE, E_PATH, E_DIRECT, E_DIR };

typedef struct {
  int kind;
  char *path;    /* as given, for messages */
  char *target;  /* what the links lead to */
  char *tmp;     /* the temporary file or folder (NULL: E_DIRECT) */
  char *backup;  /* the old target under a second name, during commit */
  FILE *f;       /* E_FILE, E_DIRECT */
  int existed;   /* the target existed when added */
  int placed;    /* commit has renamed tmp onto target */
  dev_t dev;     /* the folder holding the target, and its name there, */
  ino_t ino;     /* to refuse two outputs naming one file */
  const char *base;
} out_entry;

struct tsr_out {
  out_entry *e;
  int n, cap;
};

tsr_status tsri_out_begin(tsr_out **t, tsr_error *err)
{
  *t = calloc(1, sizeof **t);
  if (!*t)
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot write: out of memory");
  return TSR_OK;
}

/* Puts the old target back from its second name; should that fail, the
 * second name stays on disk (forgotten here, never removed): the old
 * content survives under TARGET.old.PID.SALT. */
static void restore_backup(out_entry *x)
{
  if (x->backup)
    rename(x->backup, x->target);
  free(x->backup);
  x->backup = NULL;
}

/* Undoes an entry that commit put in place: the new target goes back to
 * its temporary name (folders) or away (new files), the old one returns. */
static void take_back(out_entry *x)
{
  if (!x->placed)
    return;
  x->placed = 0;
  if (x->kind == E_DIR) {
    rename(x->target, x->tmp); /* then removed with the temporaries */
    restore_backup(x);
    return;
  }
  if (!x->existed)
    unlink(x->target);
  restore_backup(x);
  free(x->tmp);
  x->tmp = NULL; /* gone: renamed onto the target */
}

/* Removes what the entry still has besides its target. */
static void clean(out_entry *x)
{
  if (x->f)
    fclose(x->f);
  x->f = NULL;
  if (x->tmp && x->kind == E_DIR) {
    remove_tree(x->tmp);
  } else if (x->tmp) {
    unlink(x->tmp);
    if (x->kind == E_PATH) { /* SQLite's companions of the temporary */
      static const char *const aux[] = {"-journal", "-wal", "-shm"};
      size_t k, n = strlen(x->tmp) + 16;
      char *a = malloc(n);
      for (k = 0; a && k < 3; k++) {
        snprintf(a, n, "%s%s", x->tmp, aux[k]);
        unlink(a);
      }
      free(a);
    }
  }
  if (x->backup && x->kind == E_DIR)
    remove_tree(x->backup);
  else if (x->backup)
    unlink(x->backup);
  free(x->path);
  free(x->target);
  free(x->tmp);
  free(x->backup);
  memset(x, 0, sizeof *x);
}

static void out_free(tsr_out *t)
{
  int i;
  for (i = 0; i < t->n; i++)
    clean(&t->e[i]);
  free(t->e);
  free(t);
}

void tsri_out_abort(tsr_out *t)
{
  if (t)
    out_free(t);
}

/* A new entry at the end of t (zeroed), or NULL. */
static out_entry *push(tsr_out *t, const char *path)
{
  out_entry *x;
  if (t->n == t->cap) {
    int cap = t->cap ? 2 * t->cap : 4;
    out_entry *e = realloc(t->e, (size_t)cap * sizeof *e);
    if (!e)
      return NULL;
    t->e = e;
    t->cap = cap;
  }
  x = &t->e[t->n];
  memset(x, 0, sizeof *x);
  if (!(x->path = strdup(path)))
    return NULL;
  t->n++;
  return x;
}

/* Drops the last entry (its temporaries too) after a failed add. */
static tsr_status pop(tsr_out *t, tsr_status st)
{
  clean(&t->e[--t->n]);
  return st;
}

/* " (a link to 'T')" when the path was a link, for messages. */
static const char *via(const out_entry *x, char *buf, size_t n)
{
  if (!x->target || !strcmp(x->path, x->target))
    return "";
  snprintf(buf, n, " (a link to '%s')", x->target);
  return buf;
}

/* Records where the target lives and refuses a second output naming it. */
static tsr_status check_unique(tsr_out *t, out_entry *x, tsr_error *err)
{
  char *slash = strrchr(x->target, '/'), *dir;
  struct stat sb;
  int i, ok;
  x->base = slash ? slash + 1 : x->target;
  dir = slash ? strip_copy(x->target, slash == x->target ? 1 : (size_t)(slash - x->target))
              : strdup(".");
  ok = dir && stat(dir, &sb) == 0;
  free(dir);
  if (!ok)
    return TSR_OK; /* creating the temporary has already named the problem */
  x->dev = sb.st_dev;
  x->ino = sb.st_ino;
  for (i = 0; i < t->n - 1; i++) {
    const out_entry *y = &t->e[i];
    if (y->base && y->dev == x->dev && y->ino == x->ino && !strcmp(y->base, x->base))
      return tsr_error_set(err, TSR_ERR_INVALID, "cannot write '%s': '%s' names the same file",
                           x->path, y->path);
  }
  return TSR_OK;
}

/* tsri_out_file and tsri_out_path: kind E_FILE or E_PATH. */
static tsr_status add_file(tsr_out *t, const char *path, int flags, int kind, tsr_error *err)
{
  out_entry *x;
  struct stat sb;
  char buf[PATH_MAX + 32];
  int fd, proc_fd;
  tsr_status st;
  if (!t || !path || !*path)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot write: no file name");
  if (!(x = push(t, path)))
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot write '%s': out of memory", path);
  x->kind = kind;
  /* Devices and FIFOs first, by what the path finally names: /dev/stdout
   * leads through /proc to names like "pipe:[123]" that only open(2) can
   * follow, so these are opened as given. */
  if (kind == E_FILE && stat(path, &sb) == 0 && (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode))) {
    x->kind = E_DIRECT;
    fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
      return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write '%s': %s", path,
                                  strerror(errno)));
    if (fstat(fd, &sb) != 0 || !(S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) ||
        !(x->f = fdopen(fd, "wb"))) {
      close(fd);
      return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write '%s': it changed while opened",
                                  path));
    }
    return TSR_OK;
  }
  if (resolve(path, &x->target, &sb, &x->existed, &proc_fd) != 0)
    return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write '%s': %s", path, strerror(errno)));
  if (kind == E_FILE && proc_fd && x->existed && S_ISREG(sb.st_mode)) {
    /* /dev/stdout redirected to a file: the shell's file, written where the
     * shell writes (appended: "> f" made it empty, ">> f" keeps its start),
     * not replaced by a new one. */
    x->kind = E_DIRECT;
    if ((fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY)) < 0 ||
        !(x->f = fdopen(fd, "ab"))) {
      if (fd >= 0)
        close(fd);
      return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write '%s': %s", path,
                                  strerror(errno)));
    }
    return TSR_OK;
  }
  if (x->existed && !S_ISREG(sb.st_mode))
    return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write '%s'%s: %s, not a regular file",
                                path, via(x, buf, sizeof buf), tsri_file_kind(sb.st_mode)));
  if (x->existed && (flags & TSR_OUT_NEW))
    return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot create '%s'%s: file exists", path,
                                via(x, buf, sizeof buf)));
  if ((fd = make_side(x->target, "tmp", 0, &x->tmp)) < 0)
    return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write '%s'%s: %s", path,
                                via(x, buf, sizeof buf), strerror(errno)));
  if (x->existed)
    fchmod(fd, sb.st_mode & 07777); /* the replacement keeps the file's permissions */
  if (kind == E_PATH) {
    close(fd);
  } else if (!(x->f = fdopen(fd, "wb"))) {
    close(fd);
    return pop(t, tsr_error_set(err, TSR_ERR_NOMEM, "cannot write '%s': %s", path,
                                strerror(errno)));
  }
  if ((st = check_unique(t, x, err)) != TSR_OK)
    return pop(t, st);
  return TSR_OK;
}

tsr_status tsri_out_file(tsr_out *t, const char *path, int flags, FILE **f, tsr_error *err)
{
  tsr_status st = add_file(t, path, flags, E_FILE, err);
  *f = st == TSR_OK ? t->e[t->n - 1].f : NULL;
  return st;
}

tsr_status tsri_out_path(tsr_out *t, const char *path, int flags, const char **tmp,
                        tsr_error *err)
{
  tsr_status st = add_file(t, path, flags, E_PATH, err);
  *tmp = st == TSR_OK ? t->e[t->n - 1].tmp : NULL;
  return st;
}

tsr_status tsri_out_dir(tsr_out *t, const char *path, tsr_out_replaceable replaceable, void *ud,
                       const char **work, tsr_error *err)
{
  out_entry *x;
  struct stat sb;
  char buf[PATH_MAX + 32];
  *work = NULL;
  if (!t || !path || !*path)
    return tsr_error_set(err, TSR_ERR_INVALID, "cannot write folder: no name");
  if (!(x = push(t, path)))
    return tsr_error_set(err, TSR_ERR_NOMEM, "cannot write folder '%s': out of memory", path);
  x->kind = E_DIR;
  if (resolve(path, &x->target, &sb, &x->existed, NULL) != 0)
    return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write folder '%s': %s", path,
                                strerror(errno)));
  if (x->existed) {
    char *real;
    int empty;
    if (!S_ISDIR(sb.st_mode))
      return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write folder '%s'%s: %s, not a folder",
                                  path, via(x, buf, sizeof buf), tsri_file_kind(sb.st_mode)));
    /* "." or "d/..": the folder's own name, for the temporary beside it */
    if (!(real = realpath(x->target, NULL)))
      return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write folder '%s': %s", path,
                                  strerror(errno)));
    free(x->target);
    x->target = real;
    empty = tsri_file_dir_empty(real);
    if (empty < 0)
      return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write folder '%s': %s", path,
                                  strerror(errno)));
    if (!empty && !(replaceable && replaceable(real, ud)))
      return pop(t, tsr_error_set(err, TSR_ERR_IO,
                                  "cannot write folder '%s'%s: not empty (give a new or empty "
                                  "folder)",
                                  path, via(x, buf, sizeof buf)));
  }
  if (make_side(x->target, "tmp", 1, &x->tmp) < 0)
    return pop(t, tsr_error_set(err, TSR_ERR_IO, "cannot write folder '%s'%s: %s", path,
                                via(x, buf, sizeof buf), strerror(errno)));
  if (x->existed)
    chmod(x->tmp, sb.st_mode & 07777);
  *work = x->tmp;
  return TSR_OK;
}

/* Renames entry x onto its target; the old target is kept aside (files:
 * when undo may be needed, i.e. several outputs).  -1 with errno. */
static int put_in_place(out_entry *x, int several)
{
  int e;
  if (x->kind == E_DIRECT)
    return 0;
  if (x->kind == E_DIR) {
    if (x->existed) {
      if (make_side(x->target, "old", 1, &x->backup) < 0)
        return -1;
      if (rename(x->target, x->backup) != 0) { /* onto the empty folder just made */
        e = errno;
        rmdir(x->backup);
        free(x->backup);
        x->backup = NULL;
        errno = e;
        return -1;
      }
    }
    if (rename(x->tmp, x->target) != 0) {
      e = errno;
      restore_backup(x);
      errno = e;
      return -1;
    }
    x->placed = 1;
    return 0;
  }
  if (x->existed && several) {
    unsigned attempt;
    /* A second name for the old file; where the file system has no hard
     * links the old file cannot be put back, but is still replaced. */
    for (attempt = 0; attempt < 100; attempt++) {
      if (!(x->backup = side_name(x->target, "old", attempt)) || link(x->target, x->backup) == 0)
        break;
      free(x->backup);
      x->backup = NULL;
      if (errno != EEXIST)
        break;
    }
  }
  if (rename(x->tmp, x->target) != 0)
    return -1;
  x->placed = 1;
  return 0;
}

tsr_status tsri_out_commit(tsr_out *t, tsr_error *err)
{
  tsr_status st = TSR_OK;
  int i;
  if (!t)
    return err && err->status ? err->status
                              : tsr_error_set(err, TSR_ERR_INVALID, "cannot write: no outputs");
  /* Every stream closed, and its errors seen, before any target changes. */
  for (i = 0; i < t->n; i++) {
    out_entry *x = &t->e[i];
    int bad, e;
    if (!x->f)
      continue;
    errno = 0;
    bad = fflush(x->f) != 0 || ferror(x->f);
    e = errno;
    if (fclose(x->f) != 0 && !bad) {
      bad = 1;
      e = errno;
    }
    x->f = NULL;
    if (bad && st == TSR_OK)
      st = tsr_error_set(err, TSR_ERR_IO, "cannot write '%s': %s", x->path,
                         e ? strerror(e) : "write error");
  }
  for (i = 0; i < t->n && st == TSR_OK; i++)
    if (put_in_place(&t->e[i], t->n > 1) != 0) {
      char buf[PATH_MAX + 32];
      const char *why = strerror(errno);
      st = tsr_error_set(err, TSR_ERR_IO, "cannot write %s'%s'%s: %s",
                         t->e[i].kind == E_DIR ? "folder " : "", t->e[i].path,
                         via(&t->e[i], buf, sizeof buf), why);
    }
  if (st != TSR_OK)
    for (i = t->n - 1; i >= 0; i--)
      take_back(&t->e[i]);
  for (i = 0; i < t->n; i++)
    if (t->e[i].placed) { /* in place: nothing of it is to be removed */
      free(t->e[i].tmp);
      t->e[i].tmp = NULL;
    }
  out_free(t);
  return st;
}

tsr_status tsri_out_write(const char *path, const void *data, size_t n, tsr_error *err)
{
  tsr_out *t;
  FILE *f;
  tsr_status st = tsri_out_begin(&t, err);
  if (st == TSR_OK && (st = tsri_out_file(t, path, 0, &f, err)) == TSR_OK && n &&
      fwrite(data, 1, n, f) != n)
    st = tsr_error_set(err, TSR_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
  if (st != TSR_OK) {
    tsri_out_abort(t);
    return st;
  }
  return tsri_out_commit(t, err);
}
