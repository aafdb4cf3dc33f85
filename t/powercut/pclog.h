/*
 * pclog.h: the record format of the power-cut log, shared by the recorder
 * (pcshim.c, an LD_PRELOAD shim) and the reader (powercut.c).
 *
 * The log is one file that every recorded process appends to.  Each record
 * is a fixed header, then the path (pathlen bytes, no NUL), the tag
 * (taglen bytes: $POWERCUT_TAG of the process), the data (len bytes, for
 * writes and output) and zero bytes up to a multiple of 8, so that every
 * header is aligned.  A record is written with one writev(2) on a file
 * opened with O_APPEND, so records from concurrent processes never mix and
 * their order in the file is the order in which the kernel appended them:
 * one global order of events.  Native byte order: the log is read on the
 * machine that wrote it.
 *
 * What each type records (off and len by type):
 *   PC_WRITE	bytes written to a file at offset off (pwrite, write, writev
 *		...), logged after the write returned: len is what it wrote.
 *   PC_TRUNC	ftruncate to off bytes (also an open with O_TRUNC: off 0),
 *		logged after it returned.
 *   PC_SYNC	fsync (off 0) or fdatasync (off 1) of the file, logged before
 *		it starts: every write logged earlier (by any process) is
 *		durable once it is.  Also (off 2) right after a write that was
 *		durable when it returned (O_SYNC, O_DSYNC, RWF_DSYNC).
 *   PC_SYNCALL	sync(2) or syncfs(2): a PC_SYNC of every file.
 *   PC_RANGE	sync_file_range: kept for the record, makes nothing durable
 *		(it flushes no metadata and no disk cache).
 *   PC_UNLINK	the path was unlinked (logged after it returned).
 *   PC_OPEN	the path was opened (off: the open flags), logged after.
 *   PC_MMAP	a writable shared mapping of the file (off, len): writes
 *		through it are not seen, so the reader refuses to rebuild such
 *		a file (files it drops anyway, like -shm, excepted).
 *   PC_OUTPUT	bytes the process writes to its standard output (fd 1),
 *		logged BEFORE they are written, so an output never appears
 *		later in the log than it really happened.
 *   PC_OUTRES	the write of the previous PC_OUTPUT of this pid wrote only
 *		off bytes (short write or error: off < its len).
 * The timestamp is CLOCK_REALTIME in ns, for people reading a dump.
 */
#ifndef PCLOG_H
#define PCLOG_H

#include <stdint.h>

#define PC_MAGIC	0x50434c47u	/* "PCLG" */

enum {
	PC_WRITE = 1,
	PC_TRUNC,
	PC_SYNC,
	PC_SYNCALL,
	PC_RANGE,
	PC_UNLINK,
	PC_OPEN,
	PC_MMAP,
	PC_OUTPUT,
	PC_OUTRES,
	PC_NTYPES
};

struct pc_rec {
	uint32_t	magic;
	uint32_t	type;
	uint64_t	size;		/* whole record, padding included */
	int64_t		off;
	uint64_t	len;
	uint64_t	ns;
	int32_t		pid;
	uint32_t	pathlen;
	uint32_t	taglen;
	uint32_t	pad;
};

#endif
