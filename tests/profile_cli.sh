#!/bin/sh
# profile_cli.sh: tessera-profile and `tessera db` as a user runs them, on
# the CPU (man pages are checked by man-options.sh): init builds a database
# from the shipped SQL and refuses to overwrite; export/init round-trips;
# missing and corrupt databases are refused with exit 2 and one clear line;
# sweep without a GPU exits 77 or names the problem.
set -u
top=${TSR_TOP_BUILDDIR:-.}
src=${TSR_TOP_SRCDIR:-..}
prof="$top/tessera-profile"
tess="$top/tessera"
tmp=$(mktemp -d /tmp/tsr_profile_cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail=0
say() { echo "profile_cli: $*"; }
bad() { say "FAIL: $*"; fail=1; }

# init: the shipped tables into a new file; never over an existing one.
"$prof" init --db "$tmp/a.db" || bad "init failed"
[ -f "$tmp/a.db" ] || bad "init wrote no file"
"$prof" init --db "$tmp/a.db" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] || bad "init over an existing file: exit $rc"
grep -q "file exists" "$tmp/err" || bad "init over an existing file: $(cat "$tmp/err")"
"$tess" db tables --db "$tmp/a.db" >"$tmp/out" || bad "db tables failed"

# export -> init --sql round trip keeps the table (empty or not).
"$prof" export --db "$tmp/a.db" --out "$tmp/a.sql" 2>/dev/null || bad "export failed"
grep -q "Lookup table exported" "$tmp/a.sql" || bad "export wrote no header"
"$prof" init --db "$tmp/b.db" --sql "$tmp/a.sql" || bad "init --sql failed"
"$tess" db show --db "$tmp/a.db" >"$tmp/sa" && "$tess" db show --db "$tmp/b.db" >"$tmp/sb" \
  || bad "db show failed"
cmp -s "$tmp/sa" "$tmp/sb" || bad "export/init changed the table"
# A bad SQL file leaves no database behind.
echo "INSERT INTO nowhere VALUES (1);" >"$tmp/bad.sql"
"$prof" init --db "$tmp/c.db" --sql "$tmp/bad.sql" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] || bad "init with bad SQL: exit $rc"
[ ! -e "$tmp/c.db" ] || bad "init with bad SQL left a file"
ls "$tmp" | grep -q 'c.db.tmp' && bad "init with bad SQL left a temporary file"

# Missing and corrupt databases: exit 2 and one line naming the file.
for cmd in "$prof build --db" "$prof report --out $tmp/r --db" "$prof export --db" "$tess db tables --db"; do
  $cmd "$tmp/missing.db" >/dev/null 2>"$tmp/err"; rc=$?
  [ $rc -eq 2 ] || bad "$cmd missing: exit $rc"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || bad "$cmd missing: $(cat "$tmp/err")"
  grep -q "missing.db" "$tmp/err" || bad "$cmd missing: $(cat "$tmp/err")"
done
head -c 5000 /dev/urandom >"$tmp/junk.db"
for cmd in "$prof build --db" "$prof export --db" "$tess db show --db"; do
  $cmd "$tmp/junk.db" >/dev/null 2>"$tmp/err"; rc=$?
  [ $rc -eq 2 ] || bad "$cmd corrupt: exit $rc"
  grep -q "junk.db" "$tmp/err" || bad "$cmd corrupt: $(cat "$tmp/err")"
done
# build on a database with no timings says so.
"$prof" build --db "$tmp/a.db" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] || bad "build without timings: exit $rc"
grep -q "no timings" "$tmp/err" || bad "build without timings: $(cat "$tmp/err")"
# report with no timings: exit 2, and no --out folder left behind
"$prof" report --db "$tmp/a.db" --out "$tmp/rep" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] || bad "report without timings: exit $rc"
grep -q "no timings" "$tmp/err" || bad "report without timings: $(cat "$tmp/err")"
[ ! -e "$tmp/rep" ] || bad "report without timings left the --out folder"
ls "$tmp" | grep -q 'rep.tmp' && bad "report without timings left a temporary folder"
# A split nothing was timed on: build and report name it with exit 2, and
# the table derived before stays as it was (build once wiped it and said
# "derived 0 lookup rows").
gzip -dc "$src/db/h100-timings.sql.gz" >"$tmp/t.sql" &&
  "$prof" init --db "$tmp/t.db" --sql "$tmp/t.sql" && "$prof" build --db "$tmp/t.db" >/dev/null ||
  bad "init and build of the recorded timings failed"
"$tess" db show --db "$tmp/t.db" >"$tmp/before" || bad "db show failed"
grep -q "combine" "$tmp/before" || bad "db show lists no derived rows: $(head -3 "$tmp/before")"
"$prof" build --db "$tmp/t.db" --split evl >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "no timings of split 'evl'" "$tmp/err" || bad "build --split evl: exit $rc: $(cat "$tmp/err")"
"$tess" db show --db "$tmp/t.db" >"$tmp/after" || bad "db show failed"
cmp -s "$tmp/before" "$tmp/after" || bad "build --split evl changed the table"
"$prof" report --db "$tmp/t.db" --split evl --out "$tmp/xr" >/dev/null 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "cannot report on split 'evl'" "$tmp/err" || bad "report --split evl: exit $rc: $(cat "$tmp/err")"
[ ! -e "$tmp/xr" ] || bad "report --split evl left its --out folder"

# Files written through links (the link stays), into FIFOs directly (they
# stay FIFOs); folders refused.
"$prof" export --db "$tmp/a.db" --out "$tmp/want.sql" 2>/dev/null || bad "export failed"
ln -s sub/real.sql "$tmp/l.sql" && mkdir "$tmp/sub"
"$prof" export --db "$tmp/a.db" --out "$tmp/l.sql" 2>/dev/null || bad "export through a link failed"
[ -L "$tmp/l.sql" ] && cmp -s "$tmp/sub/real.sql" "$tmp/want.sql" || bad "export --out a link: link replaced or target not written"
mkfifo "$tmp/f.sql"
timeout 20 cat "$tmp/f.sql" >"$tmp/from_fifo.sql" &
reader=$!
timeout 20 "$prof" export --db "$tmp/a.db" --out "$tmp/f.sql" 2>/dev/null || bad "export --out a FIFO: exit $?"
wait $reader || bad "export --out a FIFO: the reader got nothing"
[ -p "$tmp/f.sql" ] && cmp -s "$tmp/from_fifo.sql" "$tmp/want.sql" || bad "export --out a FIFO: replaced or not written"
mkdir "$tmp/d.sql"
"$prof" export --db "$tmp/a.db" --out "$tmp/d.sql" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "'$tmp/d.sql': a directory, not a regular file" "$tmp/err" || bad "export --out a folder: exit $rc: $(cat "$tmp/err")"
[ -d "$tmp/d.sql" ] || bad "export --out a folder: folder replaced"
# init through a dangling link creates its target, keeps the link; a link to
# an existing file is an existing file
ln -s sub/new.db "$tmp/ln.db"
"$prof" init --db "$tmp/ln.db" 2>"$tmp/err" || bad "init through a link: $(cat "$tmp/err")"
[ -L "$tmp/ln.db" ] && [ -f "$tmp/sub/new.db" ] || bad "init through a link replaced the link"
"$tess" db tables --db "$tmp/ln.db" >/dev/null || bad "db tables through a link"
"$prof" init --db "$tmp/ln.db" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "file exists" "$tmp/err" || bad "init over a link to a file: exit $rc"
mkdir "$tmp/d.db"
"$prof" init --db "$tmp/d.db" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "d.db" "$tmp/err" || bad "init --db a folder: exit $rc: $(cat "$tmp/err")"
[ -d "$tmp/d.db" ] || bad "init --db a folder: folder replaced"
# FIFOs (nothing writes them) as the database or --sql: exit 2 at once
mkfifo "$tmp/f.db"
for cmd in "$prof build --db" "$prof export --db" "$prof report --out $tmp/r2 --db" "$tess db tables --db"; do
  timeout 1 $cmd "$tmp/f.db" >/dev/null 2>"$tmp/err"; rc=$?
  [ $rc -eq 2 ] || bad "$cmd FIFO: exit $rc (124: it waited)"
  grep -q "f.db': a FIFO, not a regular file" "$tmp/err" || bad "$cmd FIFO: $(cat "$tmp/err")"
done
[ ! -e "$tmp/r2" ] || bad "report of a FIFO left its --out folder"
mkfifo "$tmp/in.sql"
timeout 1 "$prof" init --db "$tmp/x.db" --sql "$tmp/in.sql" 2>"$tmp/err"; rc=$?
[ $rc -eq 2 ] && grep -q "in.sql': a FIFO" "$tmp/err" || bad "init --sql FIFO: exit $rc: $(cat "$tmp/err")"
[ ! -e "$tmp/x.db" ] || bad "init --sql FIFO left a database"

# Usage errors.
"$prof" frobnicate >/dev/null 2>&1; [ $? -eq 2 ] || bad "unknown command accepted"
"$prof" build >/dev/null 2>&1; [ $? -eq 2 ] || bad "build without --db accepted"
"$tess" db show --level 7 >/dev/null 2>&1; [ $? -eq 2 ] || bad "db show --level 7 accepted"
# sweep's numeric options: a bad value is named, exit 2, before any GPU is touched
for opt in "--settle-ms -5" "--settle-ms nan" "--settle-ms 3x" "--settle-ms inf" "--repeats 0" "--budget -1"; do
  "$prof" sweep --corpus "$tmp/none" --db "$tmp/s.db" $opt >/dev/null 2>"$tmp/err"; rc=$?
  v=${opt#* }
  [ $rc -eq 2 ] && grep -q "invalid value '$v' for ${opt% *}" "$tmp/err" || bad "sweep $opt: exit $rc: $(cat "$tmp/err")"
done
[ ! -e "$tmp/s.db" ] || bad "a refused sweep left a database"

# sweep: without a GPU, exit 77 (skip); with one, it needs a corpus.
"$prof" sweep --corpus "$tmp/none" --db "$tmp/s.db" >/dev/null 2>"$tmp/err"; rc=$?
case $rc in
  2|77) ;;
  *) bad "sweep of a missing corpus: exit $rc: $(cat "$tmp/err")" ;;
esac
[ $fail -eq 0 ] && say "ok"
exit $fail
