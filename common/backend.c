/*
 * backend.c: the storage interface the programs call.  It picks the
 * backend a database name asks for and passes each operation on to it
 * (the contract is in backend.h); what is the same for every backend is
 * here: finding the default database, who this process is when it joins
 * as a consumer.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"

/* The XDG path of the default database, or NULL without a HOME. */
static const char *
xdg_path(void)
{
	static char buf[PATH_MAX];
	const char *env;

	if ((env = getenv("XDG_DATA_HOME")) && *env)
		snprintf(buf, sizeof buf, "%s/mq/mq.db", env);
	else if ((env = getenv("HOME")) && *env)
		snprintf(buf, sizeof buf, "%s/.local/share/mq/mq.db", env);
	else
		return NULL;
	return buf;
}

const char *
mq_default_path(void)
{
	const char *env, *p;

	if ((env = getenv("MQ_DB")) && *env)
		return env;
	if (!(p = xdg_path()))
		mq_die(MQ_EX_USAGE, "no database: set MQ_DB or HOME, or use -d");
	return p;
}

/*
 * Whether path is the default database under XDG_DATA_HOME or HOME: its
 * directories are made mode 0700 (the XDG rule), for messages may hold
 * secrets and nobody else has a reason to read them.
 */
int
mq_is_private(const char *path)
{
	const char *p = xdg_path();

	return p && !strcmp(p, path);
}

/*
 * A PostgreSQL connection: a postgresql:// or postgres:// URL, or a libpq
 * keyword string (key=value ..., which no sane file name looks like: it
 * starts with a libpq keyword and an equals sign).
 */
int
mq_is_pg(const char *path)
{
	static const char *keys[] = { "host", "hostaddr", "port", "dbname",
	    "user", "service", "sslmode", "options", "application_name",
	    "connect_timeout", "passfile", "target_session_attrs", NULL };
	size_t n;
	int i;

	if (!strncmp(path, "postgresql://", 13) ||
	    !strncmp(path, "postgres://", 11))
		return 1;
	for (i = 0; keys[i]; i++) {
		n = strlen(keys[i]);
		if (!strncmp(path, keys[i], n) &&
		    path[n + strspn(path + n, " ")] == '=')
			return 1;
	}
	return 0;
}

struct mq *
mq_open(const char *path, int mode)
{
	if (!path)
		path = mq_default_path();
	if (mq_is_pg(path)) {
#ifdef MQ_PG
		mq_pg_load();	/* only now: SQLite never loads libpq */
		return mq_pg_open(path, mode);
#else
		mq_die(MQ_EX_USAGE, "this build has no PostgreSQL support "
		    "(rebuild with libpq-dev installed)");
#endif
	}
	return mq_sqlite_open(path, mode);
}

void
mq_close(struct mq *q)
{
	if (q)
		q->be->close(q);
}

int64_t
mq_idle_ms(struct mq *q)
{
	return q->be->idle_ms;
}

const char *
mq_path(struct mq *q)
{
	return q->path;
}

int
mq_topic_get(struct mq *q, const char *name, struct mq_topic *t)
{
	return q->be->topic_get(q, name, t);
}

int
mq_topic_list(struct mq *q, struct mq_topic **out)
{
	return q->be->topic_list(q, out);
}

int
mq_topic_create(struct mq *q, const char *name, const struct mq_topic_conf *c,
    struct mq_topic *t)
{
	return q->be->topic_create(q, name, c, t);
}

int
mq_topic_conf(struct mq *q, const char *name, const struct mq_topic_conf *c,
    struct mq_topic *t)
{
	return q->be->topic_conf(q, name, c, t);
}

int
mq_topic_delete(struct mq *q, const char *name, int force, struct mq_held *h)
{
	return q->be->topic_delete(q, name, force, h);
}

int
mq_group_get(struct mq *q, const char *topic, const char *name,
    struct mq_group *g)
{
	return q->be->group_get(q, topic, name, g);
}

int
mq_group_conf(struct mq *q, const char *topic, const char *name,
    const struct mq_group_conf *c, struct mq_group *g)
{
	return q->be->group_conf(q, topic, name, c, g);
}

int
mq_group_delete(struct mq *q, const char *topic, const char *name, int force,
    struct mq_held *h)
{
	return q->be->group_delete(q, topic, name, force, h);
}

int
mq_snapshot(struct mq *q, struct mq_lag *L)
{
	return q->be->snapshot(q, L);
}

int
mq_append(struct mq *q, struct mq_append *a, const struct mq_rec *r,
    size_t n, struct mq_sent *out)
{
	return n ? q->be->append(q, a, r, n, out) : 0;
}

int
mq_outbox_move(struct mq *q, struct mq_outbox *o)
{
	return o->n ? q->be->outbox(q, o) : 0;
}

int
mq_claim(struct mq *q, const struct mq_claim *c, struct mq_msg *out, int max,
    int64_t *next_due)
{
	return q->be->claim(q, c, out, max, next_due);
}

void
mq_settle(struct mq *q, struct mq_settle *s, size_t n)
{
	if (n)
		q->be->settle(q, s, n);
}

int
mq_read(struct mq *q, const struct mq_read *r, struct mq_msg *out, int max)
{
	return q->be->read(q, r, out, max);
}

static int
by_off(const void *a, const void *b)
{
	const struct mq_item *x = a, *y = b;

	return (x->off > y->off) - (x->off < y->off);
}

/* The first max of both sources (each in order, up to max), in order. */
int
mq_list(struct mq *q, const struct mq_list *l, struct mq_item *out, int max)
{
	struct mq_item *all = mq_array(NULL, 2 * (size_t)max, sizeof *all);
	int i, n;

	if ((n = q->be->list(q, l, all, max)) < 0) {
		free(all);
		return n;
	}
	qsort(all, n, sizeof *all, by_off);
	for (i = max; i < n; i++)
		mq_item_free(&all[i]);
	if (n > max)
		n = max;
	memcpy(out, all, n * sizeof *out);
	free(all);
	return n;
}

void
mq_item_free(struct mq_item *it)
{
	mq_msg_free(&it->m);
	free(it->host);
	free(it->reason);
	memset(it, 0, sizeof *it);
}

int64_t
mq_offset_at(struct mq *q, const char *topic, int64_t ts)
{
	return q->be->offset_at(q, topic, ts);
}

int
mq_move(struct mq *q, const char *topic, const char *group,
    const struct mq_move *m, struct mq_moved *out)
{
	return q->be->move(q, topic, group, m, out);
}

/*
 * An offset named twice is one dead letter: the backend sees each once,
 * and found says for every place whether its offset was one.
 */
int
mq_redrive(struct mq *q, const char *topic, const char *group,
    const int64_t *offs, int *found, int n, int dry, int64_t *count)
{
	int64_t *u = n ? mq_array(NULL, n, sizeof *u) : NULL;
	int *at = n ? mq_array(NULL, n, sizeof *at) : NULL;
	int i, j, nu = 0, rc;

	for (i = 0; i < n; i++) {
		for (j = 0; j < nu && u[j] != offs[i]; j++)
			;
		if (j == nu)
			u[nu++] = offs[i];
		at[i] = j;
	}
	rc = q->be->redrive(q, topic, group, n ? u : offs, found, nu, dry,
	    count);
	for (i = n - 1; i >= 0; i--)	/* found[at[i]], at[i] <= i */
		found[i] = found[at[i]];
	free(u);
	free(at);
	return rc;
}

static int
cmp_off(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

/* The backend sees each offset once, in order. */
int
mq_mark(struct mq *q, const struct mq_mark *m, struct mq_marked **out)
{
	struct mq_mark u = *m;
	int64_t *o = NULL;
	int i, n = 0, rc;

	if (m->noffs) {
		o = mq_array(NULL, m->noffs, sizeof *o);
		memcpy(o, m->offs, m->noffs * sizeof *o);
		qsort(o, m->noffs, sizeof *o, cmp_off);
		for (i = 0; i < m->noffs; i++)
			if (!n || o[n - 1] != o[i])
				o[n++] = o[i];
		u.offs = o;
		u.noffs = n;
	}
	rc = q->be->mark(q, &u, out);
	free(o);
	return rc;
}

int
mq_trace(struct mq *q, const char *topic, int64_t off, struct mq_trace *tr)
{
	memset(tr, 0, sizeof *tr);
	return q->be->trace(q, topic, off, tr);
}

int
mq_purge(struct mq *q, const char *topic, struct mq_purge *p)
{
	return q->be->purge(q, topic, p);
}

void
mq_vacuum(struct mq *q)
{
	q->be->vacuum(q);
}

void
mq_backup(struct mq *q, const char *file)
{
	if (!q->be->backup)
		mq_die(MQ_EX_USAGE, "backup: a %s database is backed up with "
		    "its own tools (pg_dump; see mq(7))", q->be->name);
	q->be->backup(q, file);
}

int64_t
mq_join(struct mq *q, const char *topic, const char *group, int latest,
    int64_t pgid, int64_t pgstart, int64_t *lease)
{
	struct mq_consumer me;

	memset(&me, 0, sizeof me);
	snprintf(me.host, sizeof me.host, "%s", mq_hostname());
	mq_boot_id(me.boot, sizeof me.boot);
	me.pid = getpid();
	me.start = mq_proc_start(getpid());
	me.since = me.seen = mq_now();
	me.pgid = pgid;
	me.pgstart = pgstart;
	return q->be->join(q, topic, group, latest, &me, lease);
}

void
mq_beat(struct mq *q, int64_t id, int64_t lease_until)
{
	q->be->beat(q, id, lease_until);
}

void
mq_leave(struct mq *q, int64_t id)
{
	q->be->leave(q, id);
}

int
mq_consumers(struct mq *q, const char *topic, const char *group,
    struct mq_consumer **out)
{
	return q->be->consumers(q, topic, group, out);
}

/*
 * Releases the leases of the group's consumers on this host whose process
 * is gone.  (A group's own members look after it: what they would claim
 * is what the dead one held.)
 */
void
mq_reap(struct mq *q, const char *topic, const char *group)
{
	char boot[40];

	mq_boot_id(boot, sizeof boot);
	q->be->reap(q, topic, group, mq_hostname(), mq_consumer_gone, boot);
}

struct mq_waiter *
mq_waiter_new(struct mq *q, const char *const *topics, int n)
{
	return q->be->waiter(q, topics, n);
}

int
mq_wait(struct mq_waiter *w, int64_t until, uint32_t *changed)
{
	uint32_t junk;

	return w->q->be->wait(w, until, changed ? changed : &junk);
}

void
mq_waiter_free(struct mq_waiter *w)
{
	if (w)
		w->q->be->waiter_free(w);
}
