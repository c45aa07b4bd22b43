/*
 * mts-e2-xapp: a FlexRIC xApp of the MEC Transport Suite.
 *
 * It subscribes to OAI's MAC (RAN function 142) and RLC (143) service models of every E2
 * node the near-RT RIC knows (nodes that connect later are found every second) and serves
 * the decoded indications as the mts-e2 stream v1 (docs/e2.md): JSON lines over TCP to
 * clients that present the token. The RNIS adapter (RNIS_SOURCE=e2) is such a client.
 *
 *   mts-e2-xapp -c flexric.conf -p <service model dir>/ -t TOKEN_FILE [-l 127.0.0.1:36430]
 *               [-i 1] [-P pci] [-B dl_prbs] [-S slots_per_frame] [-H harq_processes]
 *
 * The MAC/RLC service models carry no cell id or bandwidth: -P/-B/-S/-H give the gNB's
 * configuration, written into every indication's "cell" (left out when not given).
 * Build: make e2-xapp FLEXRIC_SRC=... FLEXRIC_BUILD=... (links FlexRIC's libe42_xapp; FlexRIC
 * v2.0.0 or 34d6810f).
 */
#include "src/xApp/e42_xapp_api.h"

/* FlexRIC after v2.0.0 (34d6810f, the commit OAI 2024.w12 pins as its E2 agent) returns the
 * node list as e2_node_arr_xapp_t; the fields this xApp reads (len, n[i].id) are the same. */
#if __has_include("src/xApp/e2_node_arr_xapp.h")
typedef e2_node_arr_xapp_t e2_node_arr_t;
#define free_e2_node_arr free_e2_node_arr_xapp
#endif
#include "src/util/time_now_us.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_NODES 16  /* C callbacks carry no context: one trampoline per node slot */
#define MAX_CLIENTS 8
#define CLIENT_SNDBUF (1 << 20) /* a client more than this behind is disconnected */

/* ---- settings ---- */

static struct {
  char token[256];
  char listen_host[64];
  int listen_port;
  int interval_ms;
  long pci, dl_prbs, slots_per_frame, harq; /* -1: not given */
} cfg = {.listen_host = "127.0.0.1", .listen_port = 36430, .interval_ms = 1,
         .pci = -1, .dl_prbs = -1, .slots_per_frame = -1, .harq = -1};

static volatile sig_atomic_t stopping, initialized;

/* A signal stops the subscription loop; before FlexRIC's init returned (it waits for the
 * RIC as long as it takes) there is nothing to undo, and a second signal does not wait for
 * the unsubscriptions (a RIC that is gone never answers them): exit at once. */
static void on_signal(int sig)
{
  (void)sig;
  if (!initialized || stopping)
    _exit(1);
  stopping = 1;
}

static void die(const char* fmt, ...)
{
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "mts-e2-xapp: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(2);
}

/* ---- a growable line buffer ---- */

typedef struct { char* b; size_t n, cap; } buf_t;

static void put(buf_t* o, const char* fmt, ...)
{
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->b + o->n, o->cap - o->n, fmt, ap);
    va_end(ap);
    if (k < 0)
      die("format error");
    if (o->n + (size_t)k < o->cap) {
      o->n += (size_t)k;
      return;
    }
    o->cap = 2 * (o->cap + (size_t)k + 1024);
    o->b = realloc(o->b, o->cap);
    if (o->b == NULL)
      die("out of memory");
  }
}

/* ---- clients ---- */

static pthread_mutex_t clients_mu = PTHREAD_MUTEX_INITIALIZER;
static int clients[MAX_CLIENTS];
static int nclients;

/* broadcast writes one whole line to every client without waiting; a client whose socket
 * buffer cannot take it is dropped (a partial line would corrupt its stream; a late
 * measurement is worse than none). */
static void broadcast(const buf_t* line)
{
  pthread_mutex_lock(&clients_mu);
  for (int i = 0; i < nclients;) {
    ssize_t w = send(clients[i], line->b, line->n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w == (ssize_t)line->n) {
      i++;
      continue;
    }
    fprintf(stderr, "mts-e2-xapp: client %d dropped (%s)\n", clients[i], w < 0 ? strerror(errno) : "behind");
    close(clients[i]);
    clients[i] = clients[--nclients];
  }
  pthread_mutex_unlock(&clients_mu);
}

/* json_field copies the value of "key" in a flat JSON object (string without escapes, or a
 * number) into out; false when absent. Enough for the client's one line. */
static bool json_field(const char* line, const char* key, char* out, size_t outlen)
{
  char pat[64];
  snprintf(pat, sizeof pat, "\"%s\"", key);
  const char* p = strstr(line, pat);
  if (p == NULL)
    return false;
  p += strlen(pat);
  while (*p == ' ' || *p == ':')
    p++;
  bool quoted = *p == '"';
  if (quoted)
    p++;
  size_t n = 0;
  while (*p && n + 1 < outlen && (quoted ? *p != '"' : (*p != ',' && *p != '}' && *p != ' '))) {
    if (*p == '\\')
      return false;
    out[n++] = *p++;
  }
  out[n] = '\0';
  return quoted ? *p == '"' : n > 0;
}

/* same length and every byte equal, in time independent of where they differ */
static bool token_ok(const char* got)
{
  size_t n = strlen(cfg.token);
  if (strlen(got) != n)
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < n; i++)
    diff |= (unsigned char)(got[i] ^ cfg.token[i]);
  return diff == 0;
}

static void refuse(int fd, const char* detail)
{
  char msg[256];
  int n = snprintf(msg, sizeof msg, "{\"type\":\"error\",\"detail\":\"%s\"}\n", detail);
  (void)!send(fd, msg, (size_t)n, MSG_NOSIGNAL);
  close(fd);
}

/* admit reads the client's first line (2 s), checks it and says hello. */
static void admit(int fd)
{
  struct timeval tv = {.tv_sec = 2};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char line[1024];
  size_t n = 0;
  while (n + 1 < sizeof line) {
    ssize_t r = recv(fd, line + n, 1, 0);
    if (r <= 0 || line[n] == '\n')
      break;
    n++;
  }
  line[n] = '\0';
  char stream[32], v[8], tok[256];
  if (!json_field(line, "stream", stream, sizeof stream) || strcmp(stream, "mts-e2") != 0 ||
      !json_field(line, "v", v, sizeof v) || strcmp(v, "1") != 0) {
    refuse(fd, "want {\\\"stream\\\":\\\"mts-e2\\\",\\\"v\\\":1,\\\"token\\\":...} as the first line");
    return;
  }
  if (!json_field(line, "token", tok, sizeof tok) || !token_ok(tok)) {
    refuse(fd, "a valid token is required");
    return;
  }
  int one = 1, sndbuf = CLIENT_SNDBUF;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  char hello[256];
  int k = snprintf(hello, sizeof hello,
                   "{\"type\":\"hello\",\"stream\":\"mts-e2\",\"v\":1,\"source\":\"mts-e2-xapp\","
                   "\"sm\":[\"mac\",\"rlc\"],\"interval_ms\":%d}\n", cfg.interval_ms);
  pthread_mutex_lock(&clients_mu);
  if (nclients == MAX_CLIENTS || send(fd, hello, (size_t)k, MSG_NOSIGNAL) != k) {
    pthread_mutex_unlock(&clients_mu);
    refuse(fd, "too many clients");
    return;
  }
  clients[nclients++] = fd;
  pthread_mutex_unlock(&clients_mu);
  fprintf(stderr, "mts-e2-xapp: client %d admitted\n", fd);
}

static void* serve(void* arg)
{
  int ln = *(int*)arg;
  while (!stopping) {
    int fd = accept(ln, NULL, NULL);
    if (fd >= 0)
      admit(fd);
  }
  return NULL;
}

static int listen_on(void)
{
  int ln = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(ln, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg.listen_port)};
  if (inet_pton(AF_INET, cfg.listen_host, &a.sin_addr) != 1)
    die("listen address %s: want an IPv4 address", cfg.listen_host);
  if (ln < 0 || bind(ln, (struct sockaddr*)&a, sizeof a) != 0 || listen(ln, 8) != 0)
    die("listen on %s:%d: %s", cfg.listen_host, cfg.listen_port, strerror(errno));
  return ln;
}

/* ---- indications ---- */

static global_e2_node_id_t nodes[MAX_NODES];
static int nnodes;

static const char* ran_name(ngran_node_t t)
{
  switch (t) {
    case ngran_eNB: return "eNB";
    case ngran_ng_eNB: return "ng-eNB";
    case ngran_gNB: return "gNB";
    case ngran_gNB_DU: return "gNB-DU";
    case ngran_eNB_DU: return "eNB-DU";
    default: return "other";
  }
}

/* put_head starts the line: its kind, node, cell, time, and the opening of its list */
static void put_head(buf_t* o, const char* type, const char* list, int slot, int64_t tstamp)
{
  global_e2_node_id_t const* n = &nodes[slot];
  o->n = 0;
  put(o, "{\"type\":\"%s\",\"node\":{\"ran\":\"%s\",\"mcc\":%u,\"mnc\":%u,\"mnc_digits\":%u,\"nb_id\":%u,\"cu_du_id\":",
      type, ran_name(n->type), n->plmn.mcc, n->plmn.mnc, n->plmn.mnc_digit_len, n->nb_id.nb_id);
  if (n->cu_du_id != NULL)
    put(o, "%lu}", (unsigned long)*n->cu_du_id);
  else
    put(o, "null}");
  put(o, ",\"cell\":{");
  const char* sep = "";
  const struct { const char* key; long v; } cell[] = {
      {"pci", cfg.pci}, {"dl_prbs", cfg.dl_prbs}, {"slots_per_frame", cfg.slots_per_frame}, {"harq_processes", cfg.harq}};
  for (size_t i = 0; i < sizeof cell / sizeof cell[0]; i++) {
    if (cell[i].v >= 0) {
      put(o, "%s\"%s\":%ld", sep, cell[i].key, cell[i].v);
      sep = ",";
    }
  }
  put(o, "},\"tstamp_us\":%ld,\"%s\":[", (long)tstamp, list);
}

static void emit_mac(int slot, mac_ind_msg_t const* m)
{
  static __thread buf_t o;
  put_head(&o, "mac", "ues", slot, m->tstamp);
  for (uint32_t i = 0; i < m->len_ue_stats; i++) {
    mac_ue_stats_impl_t const* u = &m->ue_stats[i];
    put(&o, "%s{\"rnti\":%u,\"frame\":%u,\"slot\":%u,\"wb_cqi\":%u,\"dl_mcs1\":%u,\"ul_mcs1\":%u,"
            "\"dl_curr_tbs\":%lu,\"ul_curr_tbs\":%lu,\"dl_sched_rb\":%lu,\"ul_sched_rb\":%lu,"
            "\"dl_bler\":%g,\"ul_bler\":%g,\"bsr\":%u,\"phr\":%d,\"pusch_snr\":%g,\"pucch_snr\":%g,"
            "\"dl_aggr_tbs\":%lu,\"dl_aggr_prb\":%u,\"dl_aggr_retx_prb\":%u,\"dl_num_harq\":%u}",
        i ? "," : "", u->rnti, u->frame, u->slot, u->wb_cqi, u->dl_mcs1, u->ul_mcs1,
        (unsigned long)u->dl_curr_tbs, (unsigned long)u->ul_curr_tbs, (unsigned long)u->dl_sched_rb,
        (unsigned long)u->ul_sched_rb, u->dl_bler, u->ul_bler, u->bsr, u->phr, u->pusch_snr, u->pucch_snr,
        (unsigned long)u->dl_aggr_tbs, u->dl_aggr_prb, u->dl_aggr_retx_prb, u->dl_num_harq);
  }
  put(&o, "]}\n");
  broadcast(&o);
}

static void emit_rlc(int slot, rlc_ind_msg_t const* m)
{
  static __thread buf_t o;
  put_head(&o, "rlc", "rbs", slot, m->tstamp);
  for (uint32_t i = 0; i < m->len; i++) {
    rlc_radio_bearer_stats_t const* r = &m->rb[i];
    put(&o, "%s{\"rnti\":%u,\"rbid\":%u,\"mode\":%u,\"txbuf_occ_bytes\":%u,\"txbuf_occ_pkts\":%u,"
            "\"txsdu_wt_us\":%u,\"txpdu_retx_pkts\":%u,\"txpdu_dd_pkts\":%u,\"txsdu_avg_time_to_tx\":%g}",
        i ? "," : "", r->rnti, r->rbid, r->mode, r->txbuf_occ_bytes, r->txbuf_occ_pkts, r->txsdu_wt_us,
        r->txpdu_retx_pkts, r->txpdu_dd_pkts, r->txsdu_avg_time_to_tx);
  }
  put(&o, "]}\n");
  broadcast(&o);
}

#define TRAMPOLINES(k)                                                                   \
  static void mac_cb_##k(sm_ag_if_rd_t const* rd) { emit_mac(k, &rd->ind.mac.msg); }    \
  static void rlc_cb_##k(sm_ag_if_rd_t const* rd) { emit_rlc(k, &rd->ind.rlc.msg); }
TRAMPOLINES(0) TRAMPOLINES(1) TRAMPOLINES(2) TRAMPOLINES(3) TRAMPOLINES(4) TRAMPOLINES(5)
TRAMPOLINES(6) TRAMPOLINES(7) TRAMPOLINES(8) TRAMPOLINES(9) TRAMPOLINES(10) TRAMPOLINES(11)
TRAMPOLINES(12) TRAMPOLINES(13) TRAMPOLINES(14) TRAMPOLINES(15)
static sm_cb const mac_cbs[MAX_NODES] = {mac_cb_0, mac_cb_1, mac_cb_2, mac_cb_3, mac_cb_4, mac_cb_5, mac_cb_6,
    mac_cb_7, mac_cb_8, mac_cb_9, mac_cb_10, mac_cb_11, mac_cb_12, mac_cb_13, mac_cb_14, mac_cb_15};
static sm_cb const rlc_cbs[MAX_NODES] = {rlc_cb_0, rlc_cb_1, rlc_cb_2, rlc_cb_3, rlc_cb_4, rlc_cb_5, rlc_cb_6,
    rlc_cb_7, rlc_cb_8, rlc_cb_9, rlc_cb_10, rlc_cb_11, rlc_cb_12, rlc_cb_13, rlc_cb_14, rlc_cb_15};
static int handles[2 * MAX_NODES];
static int nhandles;

static bool known(global_e2_node_id_t const* id)
{
  for (int i = 0; i < nnodes; i++)
    if (eq_global_e2_node_id(&nodes[i], id))
      return true;
  return false;
}

/* subscribe_new subscribes MAC and RLC of every node with a MAC (monolithic or DU) not yet
 * subscribed. */
static void subscribe_new(void)
{
  static char interval[16];
  snprintf(interval, sizeof interval, "%d_ms", cfg.interval_ms);
  e2_node_arr_t arr = e2_nodes_xapp_api();
  for (int i = 0; i < arr.len; i++) {
    global_e2_node_id_t* id = &arr.n[i].id;
    if (known(id) || !(NODE_IS_MONOLITHIC(id->type) || NODE_IS_DU(id->type)))
      continue;
    if (nnodes == MAX_NODES) {
      fprintf(stderr, "mts-e2-xapp: more than %d E2 nodes: node %u not subscribed\n", MAX_NODES, id->nb_id.nb_id);
      continue;
    }
    int k = nnodes;
    nodes[k] = cp_global_e2_node_id(id);
    nnodes++;
    sm_ans_xapp_t mac = report_sm_xapp_api(id, 142, interval, mac_cbs[k]);
    sm_ans_xapp_t rlc = report_sm_xapp_api(id, 143, interval, rlc_cbs[k]);
    if (mac.success)
      handles[nhandles++] = mac.u.handle;
    if (rlc.success)
      handles[nhandles++] = rlc.u.handle;
    fprintf(stderr, "mts-e2-xapp: node %s nb_id %u: MAC %s, RLC %s every %s\n", ran_name(id->type),
            id->nb_id.nb_id, mac.success ? "subscribed" : "refused", rlc.success ? "subscribed" : "refused", interval);
  }
  free_e2_node_arr(&arr);
}

static void read_token(const char* path)
{
  FILE* f = fopen(path, "r");
  if (f == NULL)
    die("token file %s: %s", path, strerror(errno));
  if (fgets(cfg.token, sizeof cfg.token, f) == NULL)
    cfg.token[0] = '\0';
  fclose(f);
  cfg.token[strcspn(cfg.token, "\r\n")] = '\0';
  if (strlen(cfg.token) < 16 || strchr(cfg.token, '"') || strchr(cfg.token, '\\'))
    die("token file %s: want one line of at least 16 characters, without quotes or backslashes", path);
}

int main(int argc, char* argv[])
{
  fr_args_t args = {0};
  const char* token_file = NULL;
  int opt;
  while ((opt = getopt(argc, argv, "c:p:t:l:i:P:B:S:H:h")) != -1) {
    switch (opt) {
      case 'c': snprintf(args.conf_file, sizeof args.conf_file, "%s", optarg); break;
      case 'p': snprintf(args.libs_dir, sizeof args.libs_dir, "%s", optarg); break;
      case 't': token_file = optarg; break;
      case 'l': {
        char* colon = strrchr(optarg, ':');
        if (colon == NULL || (size_t)(colon - optarg) >= sizeof cfg.listen_host)
          die("-l %s: want host:port", optarg);
        snprintf(cfg.listen_host, (size_t)(colon - optarg) + 1, "%s", optarg);
        cfg.listen_port = atoi(colon + 1);
        break;
      }
      case 'i': cfg.interval_ms = atoi(optarg); break;
      case 'P': cfg.pci = atol(optarg); break;
      case 'B': cfg.dl_prbs = atol(optarg); break;
      case 'S': cfg.slots_per_frame = atol(optarg); break;
      case 'H': cfg.harq = atol(optarg); break;
      default:
        fprintf(stderr, "usage: %s -c flexric.conf -p SM_DIR/ -t TOKEN_FILE [-l host:port] [-i 1|2|5|10|100|1000]"
                        " [-P pci] [-B dl_prbs] [-S slots_per_frame] [-H harq_processes]\n", argv[0]);
        return opt == 'h' ? 0 : 2;
    }
  }
  if (args.conf_file[0] == '\0' || args.libs_dir[0] == '\0' || token_file == NULL)
    die("-c, -p and -t are required (-h for usage)");
  if (args.libs_dir[strlen(args.libs_dir) - 1] != '/')
    die("-p %s: FlexRIC wants the directory with a trailing /", args.libs_dir);
  int const intervals[] = {1, 2, 5, 10, 100, 1000};
  bool ok = false;
  for (size_t i = 0; i < sizeof intervals / sizeof intervals[0]; i++)
    ok |= cfg.interval_ms == intervals[i];
  if (!ok)
    die("-i %d: OAI's MAC/RLC SMs report every 1, 2, 5, 10, 100 or 1000 ms", cfg.interval_ms);
  read_token(token_file);

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);
  int ln = listen_on();
  pthread_t server;
  pthread_create(&server, NULL, serve, &ln);
  fprintf(stderr, "mts-e2-xapp: mts-e2 stream on %s:%d\n", cfg.listen_host, cfg.listen_port);

  init_xapp_api(&args);
  initialized = 1;
  while (!stopping) {
    subscribe_new();
    sleep(1);
  }
  alarm(3); /* unsubscribing from a RIC that is gone would wait forever: SIGALRM ends it */
  for (int i = 0; i < nhandles; i++)
    rm_report_sm_xapp_api(handles[i]);
  while (!try_stop_xapp_api())
    usleep(1000);
  fprintf(stderr, "mts-e2-xapp: stopped\n");
  return 0;
}
