/* core/serve.c - `grmhost train --metrics-port N`: the latest value of every metric in
 * Prometheus' text exposition format (version 0.0.4), over HTTP on 127.0.0.1, from a libuv
 * loop on a thread of its own (DESIGN.md §7: libuv carries the metrics endpoint). Every
 * request, whatever its path, gets the page and the connection is closed (HTTP/1.0), so
 * `curl http://127.0.0.1:N/metrics` and a Prometheus scrape both work. The trainer never
 * waits for it: the page is built from the metrics sink under the sink's lock. */
#include "pipeline.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

enum { SERVE_REQUEST_MAX = 8192 };   /* a request's header; more is answered and closed */

struct grm__serve {
    uv_loop_t loop;
    uv_tcp_t server;
    uv_async_t stop;
    pthread_t thread;
    int port;
    grm__metrics *metrics;           /* borrowed: outlives the server */
};

typedef struct conn {
    uv_tcp_t tcp;
    grm__serve *s;
    char req[SERVE_REQUEST_MAX];
    size_t len;
    int answered;
    uv_write_t wr;
    char *page;                      /* owned: the response */
} conn;

static void conn_closed(uv_handle_t *h)
{
    conn *c = h->data;
    free(c->page);
    free(c);
}

static void written(uv_write_t *w, int status)
{
    conn *c = w->data;
    (void)status;   /* ECANCELED when stopping: the handle is closing already */
    if (!uv_is_closing((uv_handle_t *)&c->tcp)) uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = h->data;
    (void)suggested;
    size_t room = sizeof c->req - c->len;
    *buf = uv_buf_init(room ? c->req + c->len : NULL, (unsigned)room);
}

/* The whole response: status line, headers and the exposition page. */
static char *response(grm__serve *s)
{
    char *body = NULL, *page = NULL;
    size_t blen = 0, plen = 0;
    FILE *f = open_memstream(&body, &blen);
    if (!f) return NULL;
    grm__metrics_prometheus(s->metrics, f);
    fclose(f);
    f = open_memstream(&page, &plen);
    if (f) {
        fprintf(f, "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8"
                   "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s", blen,
                body ? body : "");
        fclose(f);
    }
    free(body);
    return page;
}

static void read_cb(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    conn *c = st->data;
    (void)buf;
    if (c->answered) return;
    if (n < 0) {   /* EOF or an error before a full request: nothing to answer */
        uv_close((uv_handle_t *)&c->tcp, conn_closed);
        return;
    }
    c->len += (size_t)n;
    int full = c->len == sizeof c->req;
    for (size_t i = 3; i < c->len && !full; i++)
        full = c->req[i - 3] == '\r' && c->req[i - 2] == '\n' && c->req[i - 1] == '\r'
               && c->req[i] == '\n';
    if (!full) return;
    c->answered = 1;
    uv_read_stop(st);
    c->page = response(c->s);
    if (!c->page) {
        uv_close((uv_handle_t *)&c->tcp, conn_closed);
        return;
    }
    uv_buf_t out = uv_buf_init(c->page, (unsigned)strlen(c->page));
    c->wr.data = c;
    if (uv_write(&c->wr, st, &out, 1, written) != 0)
        uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void on_connection(uv_stream_t *server, int status)
{
    grm__serve *s = server->data;
    if (status < 0) return;
    conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->s = s;
    uv_tcp_init(&s->loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0
        || uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb) != 0)
        uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

/* At stop: every handle of the loop closes, so uv_run returns. */
static void close_one(uv_handle_t *h, void *arg)
{
    grm__serve *s = arg;
    if (uv_is_closing(h)) return;
    int is_conn = h != (uv_handle_t *)&s->server && h != (uv_handle_t *)&s->stop;
    uv_close(h, is_conn ? conn_closed : NULL);
}

static void on_stop(uv_async_t *a)
{
    grm__serve *s = a->data;
    uv_walk(&s->loop, close_one, s);
}

static void *serve_thread(void *arg)
{
    grm__serve *s = arg;
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return NULL;
}

grm_status grm__serve_start(int port, grm__metrics *metrics, grm__serve **out)
{
    grm__serve *s = calloc(1, sizeof *s);
    struct sockaddr_in addr;
    int rc;
    *out = NULL;
    if (!s) return grm_errorf(GRM_ENOMEM, "out of memory");
    s->metrics = metrics;
    if ((rc = uv_loop_init(&s->loop)) != 0) {
        free(s);
        return grm_errorf(GRM_EIO, "--metrics-port: %s", uv_strerror(rc));
    }
    uv_tcp_init(&s->loop, &s->server);
    s->server.data = s;
    uv_async_init(&s->loop, &s->stop, on_stop);
    s->stop.data = s;
    uv_ip4_addr("127.0.0.1", port, &addr);
    if ((rc = uv_tcp_bind(&s->server, (const struct sockaddr *)&addr, 0)) != 0
        || (rc = uv_listen((uv_stream_t *)&s->server, 16, on_connection)) != 0) {
        grm_status st = grm_errorf(GRM_EIO, "--metrics-port %d: cannot listen on 127.0.0.1:%d: "
                                   "%s; choose another port (0: any free one)", port, port,
                                   uv_strerror(rc));
        uv_close((uv_handle_t *)&s->server, NULL);
        uv_close((uv_handle_t *)&s->stop, NULL);
        uv_run(&s->loop, UV_RUN_DEFAULT);
        uv_loop_close(&s->loop);
        free(s);
        return st;
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    uv_tcp_getsockname(&s->server, (struct sockaddr *)&bound, &blen);
    s->port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    if (pthread_create(&s->thread, NULL, serve_thread, s) != 0) {
        uv_close((uv_handle_t *)&s->server, NULL);
        uv_close((uv_handle_t *)&s->stop, NULL);
        uv_run(&s->loop, UV_RUN_DEFAULT);
        uv_loop_close(&s->loop);
        free(s);
        return grm_errorf(GRM_EINTERNAL, "--metrics-port: cannot start the server thread");
    }
    *out = s;
    return GRM_OK;
}

int grm__serve_port(const grm__serve *s)
{
    return s->port;
}

void grm__serve_stop(grm__serve *s)
{
    if (!s) return;
    uv_async_send(&s->stop);
    pthread_join(s->thread, NULL);
    uv_loop_close(&s->loop);
    free(s);
}
