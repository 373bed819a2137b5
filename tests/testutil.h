/* Helpers shared by the unit tests: a scratch folder per test program, data paths. */
#ifndef SP_TESTUTIL_H
#define SP_TESTUTIL_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The scratch folder of this test program, made by tmpdir_setup(). */
static char tmpdir[256];

/* Makes $TMPDIR/<name>.XXXXXX; a cmocka group setup (returns 0 or -1). */
static inline int tmpdir_make(const char *name)
{
	const char *base = getenv("TMPDIR");
	snprintf(tmpdir, sizeof tmpdir, "%s/%s.XXXXXX", base != NULL && *base ? base : "/tmp", name);
	return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

/* Removes the scratch folder and what the tests left in it (files and
 * empty sub-folders, one level). */
static inline int tmpdir_remove(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	char path[600];

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
		if (unlink(path) != 0)
			rmdir(path);
	}
	closedir(d);
	return rmdir(tmpdir);
}

static inline void tmp_path(char *buf, size_t size, const char *name)
{
	snprintf(buf, size, "%s/%s", tmpdir, name);
}

/* The path of a file of the shared reference data ($SP_SHARED, default
 * ../shared): shared_path(buf, size, "data/desi/ref_patch.fits"). */
static inline const char *shared_path(char *buf, size_t size, const char *rel)
{
	const char *sh = getenv("SP_SHARED");
	snprintf(buf, size, "%s/%s", sh != NULL && *sh ? sh : "../shared", rel);
	return buf;
}

/* How many temporaries of an output set (src/io/fsutil.h: ".NAME.starpipe-tmp.*")
 * are beside the output `path`. */
static inline int temps_beside(const char *path)
{
	char dir[600], prefix[640];
	const char *slash = strrchr(path, '/');
	int n = 0;
	snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	snprintf(prefix, sizeof prefix, ".%s.starpipe-tmp.", slash ? slash + 1 : path);
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d != NULL && (e = readdir(d)) != NULL)
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	if (d != NULL)
		closedir(d);
	return n;
}

#endif /* SP_TESTUTIL_H */
