/*
 * pq.h: the libpq functions the backend calls, each through a pointer
 * that pq.c fills from dlopen when a PostgreSQL database is first opened
 * (mq_pg_load).  The programs are not linked with libpq: loading it and
 * what it needs (Kerberos, LDAP, OpenSSL ...) cost some 10 ms of CPU at
 * every start, on SQLite too, and scripts run mq-send once a message.
 *
 * Included by pg.h after libpq-fe.h, whose prototypes the defines below
 * leave unused: PQexec(...) calls pq_PQexec.  A libpq function that is
 * not in the list fails to link (there is no -lpq): add it here, with
 * its prototype from libpq-fe.h.
 */
#ifndef MQ_PQ_H
#define MQ_PQ_H

/* X(return type, name, parameters) */
#define PQ_FUNCS \
	X(void, PQclear, (PGresult *)) \
	X(char *, PQcmdTuples, (PGresult *)) \
	X(PGconn *, PQconnectdbParams, (const char *const *, \
	    const char *const *, int)) \
	X(int, PQconnectionNeedsPassword, (const PGconn *)) \
	X(int, PQconsumeInput, (PGconn *)) \
	X(char *, PQdb, (const PGconn *)) \
	X(int, PQenterPipelineMode, (PGconn *)) \
	X(char *, PQerrorMessage, (const PGconn *)) \
	X(PGresult *, PQexec, (PGconn *, const char *)) \
	X(PGresult *, PQexecParams, (PGconn *, const char *, int, \
	    const Oid *, const char *const *, const int *, const int *, int)) \
	X(int, PQexitPipelineMode, (PGconn *)) \
	X(void, PQfinish, (PGconn *)) \
	X(void, PQfreemem, (void *)) \
	X(PGresult *, PQgetResult, (PGconn *)) \
	X(int, PQgetisnull, (const PGresult *, int, int)) \
	X(int, PQgetlength, (const PGresult *, int, int)) \
	X(char *, PQhost, (const PGconn *)) \
	X(char *, PQgetvalue, (const PGresult *, int, int)) \
	X(PGresult *, PQmakeEmptyPGresult, (PGconn *, ExecStatusType)) \
	X(PGnotify *, PQnotifies, (PGconn *)) \
	X(int, PQntuples, (const PGresult *)) \
	X(int, PQpipelineSync, (PGconn *)) \
	X(char *, PQport, (const PGconn *)) \
	X(void, PQreset, (PGconn *)) \
	X(char *, PQresultErrorField, (const PGresult *, int)) \
	X(char *, PQresultErrorMessage, (const PGresult *)) \
	X(ExecStatusType, PQresultStatus, (const PGresult *)) \
	X(int, PQsendPrepare, (PGconn *, const char *, const char *, int, \
	    const Oid *)) \
	X(int, PQsendQueryParams, (PGconn *, const char *, int, const Oid *, \
	    const char *const *, const int *, const int *, int)) \
	X(int, PQsendQueryPrepared, (PGconn *, const char *, int, \
	    const char *const *, const int *, const int *, int)) \
	X(int, PQserverVersion, (const PGconn *)) \
	X(PQnoticeReceiver, PQsetNoticeReceiver, (PGconn *, PQnoticeReceiver, \
	    void *)) \
	X(int, PQsocket, (const PGconn *)) \
	X(ConnStatusType, PQstatus, (const PGconn *)) \
	X(unsigned char *, PQunescapeBytea, (const unsigned char *, size_t *)) \
	X(char *, PQuser, (const PGconn *))

/* (name is only pasted or quoted, never expanded: an X may follow the
   defines, as in pq.c) */
#define X(ret, name, args)	extern ret (*pq_##name) args;
PQ_FUNCS
#undef X

#define PQclear			pq_PQclear
#define PQcmdTuples		pq_PQcmdTuples
#define PQconnectdbParams	pq_PQconnectdbParams
#define PQconnectionNeedsPassword pq_PQconnectionNeedsPassword
#define PQconsumeInput		pq_PQconsumeInput
#define PQdb			pq_PQdb
#define PQenterPipelineMode	pq_PQenterPipelineMode
#define PQerrorMessage		pq_PQerrorMessage
#define PQexec			pq_PQexec
#define PQexecParams		pq_PQexecParams
#define PQexitPipelineMode	pq_PQexitPipelineMode
#define PQfinish		pq_PQfinish
#define PQfreemem		pq_PQfreemem
#define PQgetResult		pq_PQgetResult
#define PQgetisnull		pq_PQgetisnull
#define PQgetlength		pq_PQgetlength
#define PQhost			pq_PQhost
#define PQgetvalue		pq_PQgetvalue
#define PQmakeEmptyPGresult	pq_PQmakeEmptyPGresult
#define PQnotifies		pq_PQnotifies
#define PQntuples		pq_PQntuples
#define PQpipelineSync		pq_PQpipelineSync
#define PQport			pq_PQport
#define PQreset			pq_PQreset
#define PQresultErrorField	pq_PQresultErrorField
#define PQresultErrorMessage	pq_PQresultErrorMessage
#define PQresultStatus		pq_PQresultStatus
#define PQsendPrepare		pq_PQsendPrepare
#define PQsendQueryParams	pq_PQsendQueryParams
#define PQsendQueryPrepared	pq_PQsendQueryPrepared
#define PQserverVersion		pq_PQserverVersion
#define PQsetNoticeReceiver	pq_PQsetNoticeReceiver
#define PQsocket		pq_PQsocket
#define PQstatus		pq_PQstatus
#define PQunescapeBytea		pq_PQunescapeBytea
#define PQuser			pq_PQuser

#endif
