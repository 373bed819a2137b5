/* File-system helpers: mkdir -p, and files written under a temporary name then renamed. */
#define _GNU_SOURCE
#include "fsutil.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

static mode_t current_umask(void)
{
	/* umask(2) cannot be read without setting it; /proc has it */
	static mode_t m = (mode_t)-1;
	if (m == (mode_t)-1) {
		FILE *f = fopen("/proc/self/status", "r");
		char line[128];
		unsigned v = 022;
		while (f != NULL && fgets(line, sizeof line, f) != NULL)
			if (sscanf(line, "Umask: %o", &v) == 1)
				break;
		if (f != NULL)
			fclose(f);
		m = (mode_t)v;
	}
	return m;
}

int sp_mkdirs(const char *path, sp_err_t *err)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
		return sp_seterr(err, SP_EINVAL, "%s: path too long", path);
	for (char *p = tmp + 1;; p++) {
		char c = *p;
		if (c != '/' && c != '\0')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
			return sp_seterr(err, SP_EIO, "%s: cannot create folder '%s': %s", path, tmp,
					 strerror(errno));
		*p = c;
		if (c == '\0')
			return 0;
	}
}

int sp_make_parent(const char *path, sp_err_t *err)
{
	char *copy = strdup(path);
	if (copy == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	int ret = sp_mkdirs(dirname(copy), err);
	free(copy);
	return ret;
}

static const char *file_kind(mode_t m)
{
	if (S_ISDIR(m))
		return "a folder";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	if (S_ISSOCK(m))
		return "a socket";
	return "not a regular file";
}

/* ---- output sets ---- */

static const char tmp_tag[] = ".starpipe-tmp.";

static const char *host_name(void)
{
	static char host[64];
	if (host[0] == '\0') {
		if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
			snprintf(host, sizeof host, "localhost");
		/* keep the name one path component with no dots (we parse it) */
		for (char *p = host; *p; p++)
			if (*p == '/' || *p == '.')
				*p = '_';
	}
	return host;
}

int sp_split_path(const char *path, char *dir, size_t dsz, char *base, size_t bsz)
{
	const char *slash = strrchr(path, '/');
	if (slash == NULL) {
		if (snprintf(dir, dsz, ".") >= (int)dsz)
			return -1;
		return snprintf(base, bsz, "%s", path) >= (int)bsz ? -1 : 0;
	}
	size_t dl = slash == path ? 1 : (size_t)(slash - path);
	if (dl >= dsz || snprintf(base, bsz, "%s", slash + 1) >= (int)bsz)
		return -1;
	memcpy(dir, path, dl);
	dir[dl] = '\0';
	return 0;
}

int sp_output_check(const char *path, sp_err_t *err)
{
	struct stat sb;
	const char *slash = strrchr(path, '/');
	if (path[0] == '\0' || (slash != NULL && slash[1] == '\0'))
		return sp_seterr(err, SP_EINVAL, "%s: an output must name a file, not a folder", path);
	if (lstat(path, &sb) != 0)
		return errno == ENOENT || errno == ENOTDIR ? 0
		       : sp_seterr(err, SP_EIO, "%s: cannot check the output: %s", path,
				   strerror(errno));
	if (S_ISLNK(sb.st_mode))
		return sp_seterr(err, SP_EIO, "%s: the output exists and is a symbolic link; "
				 "refused (remove it or choose another name)", path);
	if (!S_ISREG(sb.st_mode))
		return sp_seterr(err, SP_EIO, "%s: the output exists and is %s; refused", path,
				 file_kind(sb.st_mode));
	return 0;
}

/* Every live temporary of the process, for a stop that cannot wait for its
 * items (sp_outset_remove_live).  The lock is also held across an output
 * set's renames, so that such a stop never falls between two of them. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static const char **live;
static size_t nlive, live_cap;

static int live_add(const char *t)
{
	int rc = 0;
	pthread_mutex_lock(&live_lock);
	if (nlive == live_cap) {
		size_t cap = live_cap ? 2 * live_cap : 64;
		const char **v = realloc(live, cap * sizeof *v);
		if (v == NULL)
			rc = -1;
		else {
			live = v;
			live_cap = cap;
		}
	}
	if (rc == 0)
		live[nlive++] = t;
	pthread_mutex_unlock(&live_lock);
	return rc;
}

/* Forgets t; the caller holds live_lock. */
static void live_del_locked(const char *t)
{
	for (size_t i = 0; i < nlive; i++)
		if (live[i] == t) {
			live[i] = live[--nlive];
			return;
		}
}

void sp_outset_remove_live(void)
{
	pthread_mutex_lock(&live_lock); /* kept: the process exits next */
	for (size_t i = 0; i < nlive; i++)
		unlink(live[i]);
	nlive = 0;
}

int sp_outset_add(sp_outset_t *s, const char *path, const char **tmp, sp_err_t *err)
{
	char dir[4096], base[1024], name[4096];
	int rc;

	*tmp = NULL;
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->f[i].path, path) == 0)
			return sp_seterr(err, SP_EINVAL, "%s: the same output is written twice", path);
	if ((rc = sp_output_check(path, err)) != 0)
		return rc;
	if (sp_split_path(path, dir, sizeof dir, base, sizeof base) != 0)
		return sp_seterr(err, SP_EINVAL, "%s: path too long", path);
	if ((rc = sp_make_parent(path, err)) != 0)
		return rc;
	/* The temporary's name must fit NAME_MAX like the output's: the
	 * output's name is cut (at a character's start) to leave room for the
	 * tag, which alone identifies a temporary (sp_outset_clean_stale_dir). */
	char suffix[160];
	int sl = snprintf(suffix, sizeof suffix, "%s%s.%ld.XXXXXX", tmp_tag, host_name(), (long)getpid());
	if (sl < 0 || sl >= (int)sizeof suffix)
		return sp_seterr(err, SP_EINVAL, "%s: path too long", path);
	size_t keep = strlen(base), room = NAME_MAX - 1 - (size_t)sl;
	if (keep > room) {
		keep = room;
		while (keep > 0 && ((unsigned char)base[keep] & 0xC0) == 0x80)
			keep--; /* not inside a UTF-8 character */
	}
	if (snprintf(name, sizeof name, "%s/.%.*s%s", dir, (int)keep, base, suffix) >= (int)sizeof name)
		return sp_seterr(err, SP_EINVAL, "%s: path too long", path);
	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 4;
		struct sp_outfile *f = realloc(s->f, cap * sizeof *f);
		if (f == NULL)
			return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
		s->f = f;
		s->cap = cap;
	}
	char *p = strdup(path), *t = strdup(name);
	if (p == NULL || t == NULL) {
		free(p);
		free(t);
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	}
	int fd = mkostemp(t, O_CLOEXEC); /* O_CREAT | O_EXCL: never an existing name */
	if (fd < 0) {
		int e = errno;
		free(p);
		free(t);
		return sp_seterr(err, SP_EIO, "%s: cannot create a temporary file in '%s': %s", path,
				 dir, strerror(e));
	}
	fchmod(fd, 0666 & ~current_umask());
	close(fd);
	if (live_add(t) != 0) {
		unlink(t);
		free(p);
		free(t);
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	}
	s->f[s->n].path = p;
	s->f[s->n].tmp = t;
	s->n++;
	*tmp = t;
	return 0;
}

static int fsync_path(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	int r = fsync(fd);
	/* folders on some file systems refuse fsync: not an error there */
	if (r != 0 && (flags & O_DIRECTORY) && (errno == EINVAL || errno == EBADF))
		r = 0;
	int e = errno;
	close(fd);
	errno = e;
	return r;
}

int sp_outset_commit(sp_outset_t *s, sp_err_t *err)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->f[i].tmp != NULL && fsync_path(s->f[i].tmp, O_RDONLY) != 0) {
			int e = errno;
			sp_outset_abort(s);
			return sp_seterr(err, SP_EIO, "%s: cannot sync the temporary file: %s",
					 s->f[i].path, strerror(e));
		}
	pthread_mutex_lock(&live_lock);
	for (size_t i = 0; i < s->n; i++) {
		if (s->f[i].tmp == NULL)
			continue;
		if (rename(s->f[i].tmp, s->f[i].path) != 0) {
			int e = errno;
			pthread_mutex_unlock(&live_lock);
			sp_outset_abort(s);
			return sp_seterr(err, SP_EIO, "%s: cannot rename into place: %s",
					 s->f[i].path, strerror(e));
		}
		live_del_locked(s->f[i].tmp);
		free(s->f[i].tmp);
		s->f[i].tmp = NULL;
	}
	pthread_mutex_unlock(&live_lock);
	for (size_t i = 0; i < s->n; i++) {
		char dir[4096], base[1024];
		if (sp_split_path(s->f[i].path, dir, sizeof dir, base, sizeof base) == 0)
			(void)fsync_path(dir, O_RDONLY | O_DIRECTORY);
	}
	return 0;
}

void sp_outset_abort(sp_outset_t *s)
{
	pthread_mutex_lock(&live_lock);
	for (size_t i = 0; i < s->n; i++)
		if (s->f[i].tmp != NULL) {
			unlink(s->f[i].tmp);
			live_del_locked(s->f[i].tmp);
			free(s->f[i].tmp);
			s->f[i].tmp = NULL;
		}
	pthread_mutex_unlock(&live_lock);
}

void sp_outset_free(sp_outset_t *s)
{
	sp_outset_abort(s);
	for (size_t i = 0; i < s->n; i++)
		free(s->f[i].path);
	free(s->f);
	memset(s, 0, sizeof *s);
}

size_t sp_outset_clean_stale_dir(const char *dir)
{
	/* ".NAME.starpipe-tmp.HOST.PID.XXXXXX": this host's, and PID is gone */
	char tag[128];
	size_t removed = 0;
	int tl = snprintf(tag, sizeof tag, "%s%s.", tmp_tag, host_name());
	if (tl >= (int)sizeof tag)
		return 0;
	DIR *d = opendir(dir);
	if (d == NULL)
		return 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] != '.')
			continue;
		const char *t = strstr(e->d_name, tag);
		if (t == NULL)
			continue;
		char *end;
		long pid = strtol(t + tl, &end, 10);
		if (end == t + tl || *end != '.' || strlen(end + 1) != 6 || pid <= 0)
			continue;
		if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue; /* ours, or a live process's */
		if (unlinkat(dirfd(d), e->d_name, 0) == 0)
			removed++;
	}
	closedir(d);
	return removed;
}

int sp_open_tmp(const char *tmp, const char *label, sp_err_t *err)
{
	int fd = open(tmp, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return sp_seterr(err, SP_EIO, "%s: cannot open the temporary file: %s", label,
				 strerror(errno));
	return fd;
}

/* Writes len bytes to fd, retrying on EINTR.  Returns 0, or the errno of
 * the failure (ENOSPC for a write that wrote nothing); *done: bytes written. */
static int write_all(int fd, const void *data, size_t len, size_t *done)
{
	const char *p = data;
	*done = 0;
	while (*done < len) {
		ssize_t w = write(fd, p + *done, len - *done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? errno : ENOSPC;
		*done += (size_t)w;
	}
	return 0;
}

int sp_write_file_into(const char *tmp, const char *label, const void *data, size_t len,
		       sp_err_t *err)
{
	int fd = sp_open_tmp(tmp, label, err);
	if (fd < 0)
		return fd;
	size_t done;
	int e = write_all(fd, data, len, &done);
	if (e != 0) {
		close(fd);
		return sp_seterr(err, SP_EIO, "%s: write failed: %s", label, strerror(e));
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		int e = errno;
		return sp_seterr(err, SP_EIO, "%s: write failed: %s", label, strerror(e));
	}
	return 0;
}

int sp_write_file_atomic(const char *path, const void *data, size_t len, sp_err_t *err)
{
	sp_outset_t s = { 0 };
	const char *tmp;
	int rc = sp_outset_add(&s, path, &tmp, err);
	if (rc == 0)
		rc = sp_write_file_into(tmp, path, data, len, err);
	if (rc == 0)
		rc = sp_outset_commit(&s, err);
	sp_outset_free(&s);
	return rc;
}

int sp_open_regular(const char *path, sp_err_t *err)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		int e = errno;
		if (e == ENOENT)
			return sp_seterr(err, SP_ENOENT, "%s: no such file", path);
		return sp_seterr(err, SP_EIO, "%s: cannot open: %s", path, strerror(e));
	}
	struct stat sb;
	if (fstat(fd, &sb) != 0) {
		int e = errno;
		close(fd);
		return sp_seterr(err, SP_EIO, "%s: cannot stat: %s", path, strerror(e));
	}
	if (!S_ISREG(sb.st_mode)) {
		close(fd);
		return sp_seterr(err, SP_EFORMAT, "%s: is %s, not a regular file; refused", path,
				 file_kind(sb.st_mode));
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
		int e = errno;
		close(fd);
		return sp_seterr(err, SP_EIO, "%s: fcntl: %s", path, strerror(e));
	}
	return fd;
}

int sp_open_append(const char *path, const char *what, sp_err_t *err)
{
	struct stat sb;
	/* lstat first, for a message that says what is there; the checks on
	 * the descriptor below are the ones that hold if it changes meanwhile */
	int there = lstat(path, &sb) == 0;
	if (there && S_ISLNK(sb.st_mode))
		return sp_seterr(err, SP_EIO, "%s: cannot open %s: it is a symbolic link; refused "
				 "(remove it or choose another name)", path, what);
	if (there && !S_ISREG(sb.st_mode))
		return sp_seterr(err, SP_EIO, "%s: cannot open %s: it is %s, not a regular file; "
				 "refused", path, what, file_kind(sb.st_mode));
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
			    O_CLOEXEC, 0666);
	if (fd < 0) {
		int e = errno;
		if (e == ELOOP)
			return sp_seterr(err, SP_EIO, "%s: cannot open %s: it is a symbolic link; refused",
					 path, what);
		if (e == ENXIO) /* a FIFO with no reader, planted since the lstat */
			return sp_seterr(err, SP_EIO, "%s: cannot open %s: it is a FIFO, not a regular "
					 "file; refused", path, what);
		return sp_seterr(err, SP_EIO, "%s: cannot open %s: %s", path, what, strerror(e));
	}
	int fl;
	if (fstat(fd, &sb) != 0) {
		int e = errno;
		close(fd);
		return sp_seterr(err, SP_EIO, "%s: cannot stat %s: %s", path, what, strerror(e));
	}
	if (!S_ISREG(sb.st_mode)) {
		close(fd);
		return sp_seterr(err, SP_EIO, "%s: cannot open %s: it is %s, not a regular file; "
				 "refused", path, what, file_kind(sb.st_mode));
	}
	if ((fl = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
		int e = errno;
		close(fd);
		return sp_seterr(err, SP_EIO, "%s: fcntl: %s", path, strerror(e));
	}
	return fd;
}

int sp_append_record(int fd, const void *data, size_t len)
{
	struct stat sb;
	off_t before = fstat(fd, &sb) == 0 ? sb.st_size : -1;
	size_t done;
	int e = write_all(fd, data, len, &done);
	if (e != 0) {
		/* half a record would make the next reader's parse fail: cut it
		 * off, unless someone else appended since */
		if (done > 0 && before >= 0 && fstat(fd, &sb) == 0 &&
		    sb.st_size == before + (off_t)done)
			(void)!ftruncate(fd, before);
		errno = e;
		return -1;
	}
	return fsync(fd);
}

FILE *sp_fopen_regular(const char *path, sp_err_t *err)
{
	int fd = sp_open_regular(path, err);
	if (fd < 0)
		return NULL;
	FILE *f = fdopen(fd, "rb");
	if (f == NULL) {
		int e = errno;
		close(fd);
		sp_seterr(err, SP_ENOMEM, "%s: fdopen: %s", path, strerror(e));
	}
	return f;
}

int sp_check_regular(const char *path, sp_err_t *err)
{
	int fd = sp_open_regular(path, err);
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

int sp_write_memstream_atomic(const char *path, FILE *f, char *const *text, const size_t *len,
			      sp_err_t *err)
{
	if (fclose(f) != 0 || *text == NULL)
		return sp_seterr(err, SP_ENOMEM, "%s: out of memory", path);
	return sp_write_file_atomic(path, *text, *len, err);
}
