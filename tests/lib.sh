# Shared helpers of the shell tests: TAP output and a scratch folder.
# Sourced by tests/*.test; expects STARPIPE, SP_SHARED and srcdir from the
# test environment (Makefile.am sets them).

: "${srcdir:=.}"
: "${STARPIPE:=./starpipe}"
: "${SP_SHARED:=$srcdir/../shared}"
tap_n=0
tap_failed=0

ok() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $*"; }
not_ok() { tap_n=$((tap_n + 1)); tap_failed=1; echo "not ok $tap_n - $*"; }

# check DESCRIPTION COMMAND...: passes when the command succeeds.
check() {
	d=$1
	shift
	if "$@"; then ok "$d"; else not_ok "$d"; fi
}

# expect_exit CODE DESCRIPTION COMMAND...: runs the command, stderr in $T/err.
expect_exit() {
	want=$1
	d=$2
	shift 2
	"$@" >"$T/out" 2>"$T/err"
	got=$?
	if [ "$got" -eq "$want" ]; then
		ok "$d"
	else
		not_ok "$d (exit $got, expected $want)"
		sed 's/^/# /' "$T/err" | head -20
	fi
}

# grep_err PATTERN DESCRIPTION: the last command's stderr matches PATTERN.
grep_err() {
	if grep -q -- "$1" "$T/err"; then
		ok "$2"
	else
		not_ok "$2 (stderr lacks '$1')"
		sed 's/^/# /' "$T/err" | head -20
	fi
}

# The program's resolved path: tests find its processes by executable
# (/proc/PID/exe), not by name.
starpipe_exe=$(readlink -f "$STARPIPE" 2>/dev/null)

# OpenBLAS's re-exec (src/cli/blas.c) runs only on CPUs that Debian's
# OpenBLAS does not know (Intel Xeon VMs); a test that sets
# calls force_blas_reexec takes that path on every CPU with AVX2, so that
# what it checks holds on both kinds of machine.
force_blas_reexec() {
	unset OPENBLAS_CORETYPE
	STARPIPE_BLAS_CORENAME=Prescott
	export STARPIPE_BLAS_CORENAME
}

# term_after DELAY COMMAND...: runs the command in the background (stderr
# in $T/err), sends it SIGTERM after DELAY seconds and waits for it; sets
# term_rc (its exit status; 143 for SIGTERM) and term_s (seconds from the
# signal to its exit, two decimals): a stop must end a run within 2 s
# (src/base/cancel.h: every long kernel loop polls it).
term_after() {
	term_d=$1
	shift
	"$@" >"$T/out" 2>"$T/err" &
	term_pid=$!
	sleep "$term_d"
	term_t0=$(date +%s.%N)
	kill -TERM "$term_pid"
	wait "$term_pid"
	term_rc=$?
	term_s=$(awk -v a="$term_t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
}

# took_less SECONDS LIMIT: SECONDS < LIMIT (decimals allowed).
took_less() {
	awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'
}

T=$(mktemp -d "${TMPDIR:-/tmp}/starpipe-test.XXXXXX")
trap 'rm -rf "$T"' EXIT
export STARPU_PERF_MODEL_DIR="${STARPU_PERF_MODEL_DIR:-$T/perfmodels}"
export STARPU_SILENT=1
# The suite runs tests side by side on two cores: a measurement that the load
# doubles must not make StarPU flush a calibrated history model (its default
# tolerance is 50 %, and a flush left perfmodels.test with fewer than 10
# samples in CI).  The caller's setting wins.
export STARPU_HISTORY_MAX_ERROR="${STARPU_HISTORY_MAX_ERROR:-1000}"

# A Python with NumPy, used only to read NPY/JSON outputs independently.
PYTHON=
for p in ${PYTHON_NUMPY:-} /usr/bin/python3 python3; do
	if "$p" -c 'import numpy' 2>/dev/null; then PYTHON=$p; break; fi
done
python3() {
	if [ -z "$PYTHON" ]; then echo "# no python3 with numpy" >&2; return 1; fi
	"$PYTHON" "$@"
}
