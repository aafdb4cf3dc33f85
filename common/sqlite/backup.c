/*
 * backup.c: a consistent copy of the database while producers and
 * consumers go on (mq-topic backup).  VACUUM INTO writes one snapshot as
 * a new, compact file; SQLite does not sync it, so this does, and only
 * then gives it its name: a backup that exists is whole and on disk.  It
 * takes the database file's mode: whoever may not read the queue may not
 * read its copy.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sq.h"

void
sq_backup(struct mq *mq, const char *file)
{
	struct sq *q = SQ(mq);
	struct stat db;
	char tmp[PATH_MAX];
	sqlite3_stmt *s;
	int fd, eno;

	if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", file, (long)getpid()) >=
	    (int)sizeof tmp)
		mq_die(MQ_EX_USAGE, "backup file name too long: %s", file);
	if (access(file, F_OK) == 0)
		mq_die(MQ_EX_NONE, "not writing the backup: %s exists", file);
	(void)unlink(tmp);		/* a dead namesake's */
	if (stat(sqlite3_db_filename(q->db, "main"), &db) < 0)
		db.st_mode = 0600;
	/* made empty first, with the mode; VACUUM INTO fills an empty file */
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
	    db.st_mode & 0666)) < 0)
		mq_die(sq_status_of_errno(errno), "cannot write the backup "
		    "%s:", file);
	close(fd);
	s = sq_stmt(q, "VACUUM INTO ?");
	sqlite3_bind_text(s, 1, tmp, -1, SQLITE_STATIC);
	if (sqlite3_step(s) != SQLITE_DONE) {
		eno = errno;
		sqlite3_reset(s);
		(void)unlink(tmp);
		if (sqlite3_extended_errcode(q->db) == SQLITE_CANTOPEN) {
			errno = eno;
			mq_die(sq_status_of_errno(eno), "cannot write the "
			    "backup %s:", file);
		}
		sq_die(q, "cannot write the backup");
	}
	sqlite3_reset(s);
	if ((fd = open(tmp, O_RDONLY | O_CLOEXEC)) < 0 || fsync(fd) < 0) {
		eno = errno;
		(void)unlink(tmp);
		errno = eno;
		mq_die(sq_status_of_errno(eno), "cannot sync %s:", tmp);
	}
	close(fd);
	if (link(tmp, file) < 0) {	/* never over a file made meanwhile */
		eno = errno;
		(void)unlink(tmp);
		errno = eno;
		if (eno == EEXIST)
			mq_die(MQ_EX_NONE, "not writing the backup: %s exists",
			    file);
		mq_die(sq_status_of_errno(eno), "cannot name the backup %s:",
		    file);
	}
	(void)unlink(tmp);
	sq_sync_dir(file);
}
