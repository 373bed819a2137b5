/* File-system helpers: mkdir -p, and files written under a temporary name then renamed. */
#define _GNU_SOURCE
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int sp_write_file_atomic(const char *path, const void *data, size_t len, sp_err_t *err)
{
	char tmp[4096];
	if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
		return sp_seterr(err, SP_EINVAL, "%s: path too long", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0666);
	if (fd < 0)
		return sp_seterr(err, SP_EIO, "%s: cannot create: %s", path, strerror(errno));
	const char *p = data;
	size_t left = len;
	while (left > 0) {
		ssize_t w = write(fd, p, left);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = errno;
			close(fd);
			unlink(tmp);
			return sp_seterr(err, SP_EIO, "%s: write failed: %s", path, strerror(e));
		}
		p += w;
		left -= (size_t)w;
	}
	if (fsync(fd) != 0 || close(fd) != 0) {
		int e = errno;
		unlink(tmp);
		return sp_seterr(err, SP_EIO, "%s: write failed: %s", path, strerror(e));
	}
	if (rename(tmp, path) != 0) {
		int e = errno;
		unlink(tmp);
		return sp_seterr(err, SP_EIO, "%s: cannot rename into place: %s", path, strerror(e));
	}
	return 0;
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
