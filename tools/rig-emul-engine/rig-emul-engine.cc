// rig-emul-engine: the userspace link-emulation engine's native data path (issue 42 item 3).
//
// Same command line, control protocol (one JSON request per line on a unix socket: ping,
// stats, configure) and statistics (rig.description.linkstats EmulStats, stats_version 2)
// as the Python engine (rig/realization/emul/engine), and the same semantics as its core
// (core.py): per direction a fixed delay, jitter (uniform or normal; order-preserving unless
// the profile allows reordering), random or Gilbert-Elliott loss, duplication (the copy is
// sent from the router by a raw socket) and a queue limit (the profile's queue_pkts, else
// twice the bandwidth-delay product, at least 1000 packets).
//
// The packet path: one NFQUEUE per direction on libmnl/libnetfilter_queue, copy mode META
// (no payload byte crosses into userspace unless duplication needs it), GSO packets whole
// unless loss or duplication must act per segment, never fail-open. The arrival time is the
// kernel's NFQA_TIMESTAMP: CLOCK_MONOTONIC when the tcx-ingress program (bpf.py) wrote it,
// a wall-clock receive stamp otherwise (converted with an offset read around the monotonic
// clock), else the time after the read (never early). One clock, CLOCK_MONOTONIC, from
// arrival to release. Releases: an absolute timerfd armed at the last deadline within half
// a batching window after the head (as the Python engine), less the learned median wake-up
// latency; a wake-up that comes early finishes the wait in a busy loop, so nothing is
// released before its deadline. Lateness is counted when the verdict has been sent.
//
// The eBPF programs are loaded by the Python entry (python -m rig.realization.emul.engine
// --native BIN ...), which then execs this binary with the maps' descriptors
// (--bpf-maps CFG STATS): this engine writes the configured delays into the audit's map
// and reads the wire audit into its statistics. The links die with this process.
//
// --simulate: no sockets; reads arrive/release commands on stdin with made-up times and
// answers on stdout (the unit tests drive the core through it, tests/test_engine_native.py).
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/types.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

using json = nlohmann::json;
typedef int64_t ns_t;

static const double MTU_WIRE_BYTES = 1514.0;
static const int NBINS = 18;
// rig.description.linkstats.LATENESS_EDGES_S (seconds)
static const double EDGES[NBINS - 1] = {-10e-3, -5e-3, -2e-3, -1e-3, -500e-6, -200e-6, -100e-6,
                                        -50e-6, 0.0,   50e-6, 100e-6, 200e-6, 500e-6, 1e-3,
                                        2e-3,   5e-3,  10e-3};
static const double TSTAMP_SANITY_S = 0.5;
static const double SPIN_MAX_S = 100e-6;
static const double BATCH_S = 400e-6;     // Timing.batch_s, scaled like the Python engine's
static const double RTT_TOL_ABS = 0.3e-3, RTT_TOL_REL = 0.01;

static ns_t mono_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (ns_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static double wall_s() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static int lateness_bin(double x) {   // bisect_right
    return (int)(std::upper_bound(EDGES, EDGES + NBINS - 1, x) - EDGES);
}
static double rtt_tolerance(double rtt) { return std::max(RTT_TOL_ABS, RTT_TOL_REL * rtt); }

// ---- the profile -------------------------------------------------------------------------
struct GE { double p = 0, r = 0, loss_bad = 1, loss_good = 0; };
struct Dir {
    double delay_s = 0, jitter_s = 0, loss = 0, duplicate = 0;
    bool normal = false, reorder = false, has_ge = false;
    GE ge;
    double rate_bps = 0;   // 0: unlimited
    long queue_pkts = -1;
    double mean_loss() const {
        if (!has_ge) return loss;
        if (ge.p + ge.r == 0) return ge.loss_good;
        double pb = ge.p / (ge.p + ge.r);
        return pb * ge.loss_bad + (1 - pb) * ge.loss_good;
    }
    bool per_segment() const { return mean_loss() > 0 || duplicate > 0; }
    long bdp_packets(double rtt) const {   // Direction.bdp_packets
        if (queue_pkts > 0) return queue_pkts;
        double rate = rate_bps > 0 ? rate_bps : 100e9;
        double bdp = rate / 8.0 * std::max(rtt, 0.001) / MTU_WIRE_BYTES;
        return std::max(1000L, (long)(2.0 * bdp));
    }
};

static double num(const json &o, const char *k, double dflt) {
    auto it = o.find(k);
    if (it == o.end() || it->is_null()) return dflt;
    if (!it->is_number()) throw std::runtime_error(std::string("profile: ") + k + ": want a number");
    return it->get<double>();
}
static Dir parse_dir(const json &o) {
    if (!o.is_object()) throw std::runtime_error("profile: a direction must be an object");
    Dir d;
    d.delay_s = num(o, "delay_s", 0);
    d.jitter_s = num(o, "jitter_s", 0);
    d.loss = num(o, "loss", 0);
    d.duplicate = num(o, "duplicate", 0);
    d.rate_bps = num(o, "rate_bps", 0);
    d.queue_pkts = (long)num(o, "queue_pkts", -1);
    auto jd = o.find("jitter_dist");
    std::string dist = (jd != o.end() && jd->is_string()) ? jd->get<std::string>() : "uniform";
    if (dist != "uniform" && dist != "normal")
        throw std::runtime_error("profile: jitter_dist must be uniform or normal");
    d.normal = dist == "normal";
    auto ro = o.find("reorder");
    d.reorder = ro != o.end() && ro->is_boolean() && ro->get<bool>();
    auto g = o.find("gemodel");
    if (g != o.end() && !g->is_null()) {
        d.has_ge = true;
        d.ge.p = num(*g, "p", 0);
        d.ge.r = num(*g, "r", 0);
        d.ge.loss_bad = num(*g, "loss_bad", 1);
        d.ge.loss_good = num(*g, "loss_good", 0);
    }
    if (d.delay_s < 0 || d.jitter_s < 0 || (d.jitter_s > d.delay_s && d.jitter_s > 0) ||
        d.loss < 0 || d.loss > 1 || d.duplicate < 0 || d.duplicate > 1)
        throw std::runtime_error("profile: delay/jitter/loss/duplicate out of range");
    return d;
}
struct Profile {
    Dir fwd, rev;
    json raw;
    double rtt() const { return fwd.delay_s + rev.delay_s; }
};
static Profile parse_profile(const json &j) {
    if (!j.is_object() || !j.contains("forward") || !j.contains("reverse"))
        throw std::runtime_error("profile: want an object with forward and reverse");
    Profile p;
    p.fwd = parse_dir(j["forward"]);
    p.rev = parse_dir(j["reverse"]);
    p.raw = j;
    return p;
}

// ---- the core (core.py DirectionQueue) ---------------------------------------------------
enum { HOLD = 0, DROP_LOSS = 1, DROP_QUEUE = 2, HOLD_DUP = 3 };
struct Held { ns_t deadline; uint32_t id; bool dup; };
struct Later { bool operator()(const Held &a, const Held &b) const {
    return a.deadline != b.deadline ? a.deadline > b.deadline : a.id > b.id; } };

struct Stats {
    uint64_t seen = 0, released = 0, dropped_loss = 0, dropped_queue = 0, duplicated = 0;
    double applied_sum = 0, late_sum = 0, late_max = 0, late_min = INFINITY;
    uint64_t hist[NBINS] = {0};
    double tol = INFINITY;
    uint64_t over = 0;
};

struct Queue {
    Dir d;
    long limit = 1000;
    bool reorder = false, ge_bad = false;
    std::deque<Held> fifo;
    std::priority_queue<Held, std::vector<Held>, Later> heap;
    ns_t last_deadline = INT64_MIN, last_released = INT64_MIN;
    Stats st;
    std::mt19937_64 *rng;
    std::uniform_real_distribution<double> U{0.0, 1.0};

    double r() { return U(*rng); }
    size_t held() const { return reorder ? heap.size() : fifo.size(); }
    void configure(const Dir &nd, long lim) {
        d = nd;
        limit = lim;
        bool ro = nd.reorder && nd.jitter_s > 0;
        if (ro != reorder) {       // keep what is held, in deadline order
            std::vector<Held> items(fifo.begin(), fifo.end());
            while (!heap.empty()) { items.push_back(heap.top()); heap.pop(); }
            std::sort(items.begin(), items.end(), [](const Held &a, const Held &b) {
                return a.deadline != b.deadline ? a.deadline < b.deadline : a.id < b.id; });
            fifo.clear();
            if (ro) for (auto &h : items) heap.push(h);
            else {
                fifo.assign(items.begin(), items.end());
                if (!items.empty()) last_deadline = items.back().deadline;
            }
        }
        reorder = ro;
    }
    bool lost() {
        if (!d.has_ge) return d.loss > 0 && r() < d.loss;
        // netem's loss_gilb_ell: transition first, then lose with the state's probability
        if (!ge_bad) {
            if (r() < d.ge.p) ge_bad = true;
            return r() < d.ge.loss_good;
        }
        if (r() < d.ge.r) ge_bad = false;
        return r() < d.ge.loss_bad;
    }
    double jittered() {
        double j = d.jitter_s;
        if (j <= 0) return d.delay_s;
        double x;
        if (d.normal) { std::normal_distribution<double> N(0.0, j); x = N(*rng); }
        else x = -j + 2 * j * r();
        return std::max(0.0, d.delay_s + x);
    }
    int arrive(uint32_t id, ns_t now) {
        st.seen++;
        if (lost()) { st.dropped_loss++; return DROP_LOSS; }
        if ((long)held() >= limit) { st.dropped_queue++; return DROP_QUEUE; }
        ns_t deadline = now + (ns_t)llround(jittered() * 1e9);
        bool dup = d.duplicate > 0 && r() < d.duplicate;
        if (reorder) heap.push({deadline, id, dup});
        else {
            if (deadline < last_deadline) deadline = last_deadline;
            last_deadline = deadline;
            fifo.push_back({deadline, id, dup});
        }
        st.applied_sum += (deadline - now) * 1e-9;
        return dup ? HOLD_DUP : HOLD;
    }
    bool next_deadline(ns_t &out) const {
        if (reorder) { if (heap.empty()) return false; out = heap.top().deadline; return true; }
        if (fifo.empty()) return false;
        out = fifo.front().deadline;
        return true;
    }
    bool last_due(ns_t lim, ns_t &out) const {
        if (reorder) {
            if (!heap.empty() && heap.top().deadline <= lim) { out = heap.top().deadline; return true; }
            return false;
        }
        bool any = false;
        for (auto &h : fifo) { if (h.deadline > lim) break; out = h.deadline; any = true; }
        return any;
    }
    // pop every packet due by upto, in release order
    void take(ns_t upto, std::vector<Held> &out) {
        if (reorder) {
            while (!heap.empty() && heap.top().deadline <= upto) { out.push_back(heap.top()); heap.pop(); }
        } else {
            while (!fifo.empty() && fifo.front().deadline <= upto) { out.push_back(fifo.front()); fifo.pop_front(); }
        }
    }
    // count a release of `out` that reached the kernel at `sent`
    void account(const std::vector<Held> &out, ns_t sent) {
        for (auto &h : out) {
            double late = (sent - h.deadline) * 1e-9;
            if (h.deadline > last_released) last_released = h.deadline;
            st.late_sum += late;
            if (late > st.late_max) st.late_max = late;
            if (late < st.late_min) st.late_min = late;
            if (late > st.tol) st.over++;
            st.hist[lateness_bin(late)]++;
            if (h.dup) st.duplicated++;
        }
        st.released += out.size();
    }
    json report(const std::string &name, json extra) const {
        uint64_t acc = st.seen - st.dropped_loss - st.dropped_queue;
        json hist = json::array();
        for (int i = 0; i < NBINS; i++) hist.push_back(st.hist[i]);
        json lat = {{"count", st.released},
                    {"mean_s", st.released ? st.late_sum / st.released : 0.0},
                    {"max_s", st.late_max}, {"hist", hist},
                    {"tol_s", std::isinf(st.tol) ? json(nullptr) : json(st.tol)},
                    {"over_tol", std::isinf(st.tol) ? json(nullptr) : json(st.over)},
                    {"min_s", st.released ? json(st.late_min) : json(nullptr)}};
        return {{"direction", name}, {"seen", st.seen}, {"released", st.released},
                {"held", held()}, {"duplicated", st.duplicated},
                {"dropped_loss", st.dropped_loss}, {"dropped_queue", st.dropped_queue},
                {"applied_delay_mean_s", acc ? st.applied_sum / acc : 0.0},
                {"lateness", lat}, {"extra", extra}};
    }
};

// ---- the wire audit's maps (bpf.py Stamper) ----------------------------------------------
static const int AUDIT_NFIELDS = 6;
static long bpf_sys(int cmd, union bpf_attr *a) { return syscall(__NR_bpf, cmd, a, sizeof(*a)); }
struct Audit {
    int cfg = -1, stats = -1, ncpu = 1;
    bool on() const { return cfg >= 0 && stats >= 0; }
    void set_delay(uint32_t dir, double delay_s) {
        if (!on()) return;
        uint64_t v = (uint64_t)std::max(0.0, std::round(delay_s * 1e9));
        union bpf_attr a;
        memset(&a, 0, sizeof(a));
        a.map_fd = cfg;
        a.key = (uint64_t)(uintptr_t)&dir;
        a.value = (uint64_t)(uintptr_t)&v;
        bpf_sys(BPF_MAP_UPDATE_ELEM, &a);
    }
    json read(uint32_t dir) {
        if (!on()) return nullptr;
        size_t per = AUDIT_NFIELDS + NBINS;
        std::vector<int64_t> v(per * ncpu);
        union bpf_attr a;
        memset(&a, 0, sizeof(a));
        a.map_fd = stats;
        a.key = (uint64_t)(uintptr_t)&dir;
        a.value = (uint64_t)(uintptr_t)v.data();
        if (bpf_sys(BPF_MAP_LOOKUP_ELEM, &a) < 0) return nullptr;
        int64_t count = 0, sum = 0, mn = INT64_MAX, mx = INT64_MIN;
        std::vector<int64_t> hist(NBINS, 0);
        for (int c = 0; c < ncpu; c++) {
            const int64_t *x = &v[c * per];
            count += x[0]; sum += x[1];
            mn = std::min(mn, x[2]); mx = std::max(mx, x[4]);
            for (int b = 0; b < NBINS; b++) hist[b] += x[AUDIT_NFIELDS + b];
        }
        return {{"count", count}, {"mean_s", count ? sum * 1e-9 / count : 0.0},
                {"max_s", mx == INT64_MIN ? 0.0 : mx * 1e-9}, {"hist", hist},
                {"min_s", mn == INT64_MAX ? json(nullptr) : json(mn * 1e-9)}};
    }
};
static int possible_cpus() {
    std::ifstream f("/sys/devices/system/cpu/possible");
    std::string s;
    if (!(f >> s)) return (int)sysconf(_SC_NPROCESSORS_CONF);
    int n = 0;
    std::stringstream ss(s);
    std::string part;
    while (std::getline(ss, part, ',')) {
        auto dash = part.find('-');
        int hi = std::stoi(dash == std::string::npos ? part : part.substr(dash + 1));
        n = std::max(n, hi + 1);
    }
    return n;
}

// ---- NFQUEUE -----------------------------------------------------------------------------
struct Lane {
    std::string name;
    int index = 0;
    uint16_t qnum = 0;
    struct mnl_socket *nl = nullptr;
    unsigned portid = 0;
    bool gso = true, copy = false;
    Queue core;
    std::unordered_map<uint32_t, std::vector<uint8_t>> stash;   // payloads to duplicate
    uint64_t tstamp_used = 0, read_stamped = 0, wakeups = 0, recvs = 0, msgs = 0, sends = 0,
             errors = 0;
    std::vector<char> verdicts;   // drop verdicts of this read, sent with the release
};

static uint32_t g_seq = 1;

static void put_params(char *buf, uint16_t q, bool gso, bool copy, struct nlmsghdr **out) {
    struct nlmsghdr *nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, q);
    nfq_nlmsg_cfg_put_params(nlh, copy ? NFQNL_COPY_PACKET : NFQNL_COPY_META, copy ? 0xFFFF : 0);
    nfq_nlmsg_cfg_put_qmaxlen(nlh, 1000000);
    // never fail open: a full queue drops, it never lets packets skip the delay
    mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN));
    mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(gso ? NFQA_CFG_F_GSO : 0));
    *out = nlh;
}

static void request_ack(Lane &l, struct nlmsghdr *nlh) {
    nlh->nlmsg_flags |= NLM_F_ACK;
    nlh->nlmsg_seq = g_seq++;
    if (mnl_socket_sendto(l.nl, nlh, nlh->nlmsg_len) < 0)
        throw std::runtime_error("nfqueue " + std::to_string(l.qnum) + ": " + strerror(errno));
    char buf[8192];
    struct timeval tv = {2, 0};
    setsockopt(mnl_socket_get_fd(l.nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ssize_t n = mnl_socket_recvfrom(l.nl, buf, sizeof(buf));
    if (n < 0) throw std::runtime_error("nfqueue " + std::to_string(l.qnum) + ": no answer");
    if (mnl_cb_run(buf, n, nlh->nlmsg_seq, l.portid, nullptr, nullptr) < 0)
        throw std::runtime_error("nfqueue " + std::to_string(l.qnum) + ": " + strerror(errno));
}

static void lane_open(Lane &l) {
    l.nl = mnl_socket_open(NETLINK_NETFILTER);
    if (!l.nl) throw std::runtime_error(std::string("netlink: ") + strerror(errno));
    int fd = mnl_socket_get_fd(l.nl);
    int rcv = 256 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof(rcv)) < 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
    int one = 1;
    setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof(one));
    if (mnl_socket_bind(l.nl, 0, MNL_SOCKET_AUTOPID) < 0)
        throw std::runtime_error(std::string("netlink bind: ") + strerror(errno));
    l.portid = mnl_socket_get_portid(l.nl);
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, l.qnum);
    nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
    request_ack(l, nlh);
    put_params(buf, l.qnum, l.gso, l.copy, &nlh);
    request_ack(l, nlh);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// a mode change while packets flow: no ack awaited (an error comes back as a netlink error)
static void lane_mode(Lane &l, bool gso, bool copy) {
    if (gso == l.gso && copy == l.copy) return;
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh;
    put_params(buf, l.qnum, gso, copy, &nlh);
    mnl_socket_sendto(l.nl, nlh, nlh->nlmsg_len);
    l.gso = gso;
    l.copy = copy;
}

static void put_verdict(std::vector<char> &out, uint16_t q, uint32_t id, int v, bool batch) {
    char buf[256];
    struct nlmsghdr *nlh = nfq_nlmsg_put(buf, batch ? NFQNL_MSG_VERDICT_BATCH : NFQNL_MSG_VERDICT, q);
    nfq_nlmsg_verdict_put(nlh, id, v);
    out.insert(out.end(), buf, buf + NLMSG_ALIGN(nlh->nlmsg_len));
}

// ---- the engine --------------------------------------------------------------------------
struct WakeComp {       // core.py WakeCompensator (running median)
    double value = 50e-6, step = 2e-6, cap = 1e-3;
    void observe(double x) {
        if (x > value) value = std::min(value + step, cap);
        else if (x < value) value = std::max(value - step, 0.0);
    }
};

struct Engine {
    Lane lanes[2];
    Profile profile;
    std::mt19937_64 rng;
    Audit audit;
    std::string stamp_note, rt_note = "off", control_path;
    int tfd = -1, epfd = -1, lfd = -1, sfd = -1, raw4 = -1, raw6 = -1;
    bool armed = false;
    ns_t target = 0, release_at = 0, armed_at = 0, started = 0;
    double batch_s = BATCH_S;
    WakeComp comp;
    uint64_t timer_wakeups = 0, spins = 0, early_wakeups = 0;
    uint64_t wake_hist[NBINS] = {0};
    std::map<int, std::string> clients;   // control fd -> buffered input
    bool stop = false;

    void set_profile(const Profile &p) {
        profile = p;
        double tol = rtt_tolerance(p.rtt());
        batch_s = BATCH_S * tol / rtt_tolerance(0.0);
        const Dir *ds[2] = {&p.fwd, &p.rev};
        for (int i = 0; i < 2; i++) {
            lanes[i].core.configure(*ds[i], ds[i]->bdp_packets(p.rtt()));
            lanes[i].core.st.tol = tol;
            audit.set_delay(i, ds[i]->delay_s);
        }
    }

    void inject(const std::vector<uint8_t> &pkt) {
        if (pkt.size() < 20) return;
        int ver = pkt[0] >> 4;
        if (ver == 4) {
            if (raw4 < 0) raw4 = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
            struct sockaddr_in sa = {};
            sa.sin_family = AF_INET;
            memcpy(&sa.sin_addr, &pkt[16], 4);
            sendto(raw4, pkt.data(), pkt.size(), 0, (struct sockaddr *)&sa, sizeof(sa));
        } else if (ver == 6 && pkt.size() >= 40) {
            if (raw6 < 0) raw6 = socket(AF_INET6, SOCK_RAW, IPPROTO_RAW);
            struct sockaddr_in6 sa = {};
            sa.sin6_family = AF_INET6;
            memcpy(&sa.sin6_addr, &pkt[24], 16);
            sendto(raw6, pkt.data(), pkt.size(), 0, (struct sockaddr *)&sa, sizeof(sa));
        }
    }

    // release what is due by upto (drop verdicts of the last read go in the same send)
    void release_lane(Lane &l, ns_t upto) {
        std::vector<Held> out;
        l.core.take(upto, out);
        if (out.empty() && l.verdicts.empty()) return;
        std::vector<char> msg;
        msg.swap(l.verdicts);
        if (!out.empty()) {
            if (l.core.reorder) for (auto &h : out) put_verdict(msg, l.qnum, h.id, NF_ACCEPT, false);
            else put_verdict(msg, l.qnum, out.back().id, NF_ACCEPT, true);
        }
        if (mnl_socket_sendto(l.nl, msg.data(), msg.size()) < 0) l.errors++;
        l.sends++;
        ns_t sent = mono_ns();
        l.core.account(out, sent);
        for (auto &h : out) if (h.dup) {
            auto it = l.stash.find(h.id);
            if (it != l.stash.end()) { inject(it->second); l.stash.erase(it); }
        }
    }

    void rearm() {
        ns_t a = 0, b = 0;
        bool ha = lanes[0].core.next_deadline(a), hb = lanes[1].core.next_deadline(b);
        if (!ha && !hb) {
            if (armed) {
                struct itimerspec its = {};
                timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr);
                armed = false;
            }
            return;
        }
        ns_t head = !ha ? b : (!hb ? a : std::min(a, b));
        if (armed && target <= head) return;
        target = release_at = head;
        ns_t lim = head + (ns_t)(batch_s / 2 * 1e9), x;
        for (auto &l : lanes) if (l.core.last_due(lim, x) && x > release_at) release_at = x;
        armed_at = release_at - (ns_t)(comp.value * 1e9);
        struct itimerspec its = {};
        ns_t t = std::max<ns_t>(armed_at, 1);
        its.it_value.tv_sec = t / 1000000000LL;
        its.it_value.tv_nsec = t % 1000000000LL;
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr);
        armed = true;
    }

    void on_timer() {
        uint64_t n;
        if (read(tfd, &n, sizeof(n)) != sizeof(n)) return;   // re-armed meanwhile
        timer_wakeups++;
        ns_t now = mono_ns();
        if (armed) {
            comp.observe((now - armed_at) * 1e-9);
            wake_hist[lateness_bin((now - armed_at) * 1e-9)]++;
            if (now < release_at) {
                early_wakeups++;
                if ((release_at - now) * 1e-9 <= std::max(SPIN_MAX_S, comp.value)) {
                    spins++;
                    while (now < release_at) now = mono_ns();
                }
            }
            armed = false;
        }
        now = mono_ns();
        for (auto &l : lanes) release_lane(l, now);
        rearm();
    }

    // one read of a lane: parse the messages, hold/drop, release what is due
    struct ReadCtx { Engine *e; Lane *l; ns_t now; double offset; std::vector<std::pair<uint32_t, ns_t>> pk; };
    static int on_msg(const struct nlmsghdr *nlh, void *data) {
        ReadCtx *c = (ReadCtx *)data;
        struct nlattr *attr[NFQA_MAX + 1] = {};
        if (nfq_nlmsg_parse(nlh, attr) < 0 || !attr[NFQA_PACKET_HDR]) return MNL_CB_OK;
        auto *ph = (struct nfqnl_msg_packet_hdr *)mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
        uint32_t id = ntohl(ph->packet_id);
        ns_t t = -1;
        if (attr[NFQA_TIMESTAMP]) {
            auto *ts = (struct nfqnl_msg_packet_timestamp *)mnl_attr_get_payload(attr[NFQA_TIMESTAMP]);
            double sec = (double)be64toh(ts->sec), usec = (double)be64toh(ts->usec);
            double k = sec + usec * 1e-6;
            if (sec > 1e9) k -= c->offset;        // a wall-clock receive stamp
            ns_t kt = (ns_t)llround(k * 1e9);
            if (kt <= c->now && kt > c->now - (ns_t)(TSTAMP_SANITY_S * 1e9)) t = kt;
        }
        if (t >= 0) c->l->tstamp_used++; else c->l->read_stamped++;
        if (c->l->copy && attr[NFQA_PAYLOAD]) {
            auto *p = (uint8_t *)mnl_attr_get_payload(attr[NFQA_PAYLOAD]);
            c->l->stash[id].assign(p, p + mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]));
        }
        c->pk.push_back({id, t});
        c->l->msgs++;
        return MNL_CB_OK;
    }
    static int on_err(const struct nlmsghdr *nlh, void *data) {
        ReadCtx *c = (ReadCtx *)data;
        auto *err = (const struct nlmsgerr *)mnl_nlmsg_get_payload(nlh);
        if (err->error) c->l->errors++;
        return MNL_CB_OK;
    }

    void on_readable(Lane &l) {
        static std::vector<char> buf(1 << 20);
        l.wakeups++;
        double w0 = wall_s();
        ns_t now = mono_ns();
        double offset = (w0 + wall_s()) / 2 - now * 1e-9;
        ReadCtx c{this, &l, now, offset, {}};
        mnl_cb_t ctl[NLMSG_MIN_TYPE] = {};
        ctl[NLMSG_ERROR] = on_err;
        for (int i = 0; i < 64; i++) {
            ssize_t n = recv(mnl_socket_get_fd(l.nl), buf.data(), buf.size(), MSG_DONTWAIT);
            if (n < 0) break;
            l.recvs++;
            c.now = mono_ns();    // a stamp is plausible up to the end of its read
            mnl_cb_run2(buf.data(), n, 0, l.portid, on_msg, &c, ctl, NLMSG_MIN_TYPE);
        }
        if (c.pk.empty()) return;
        ns_t seen = mono_ns();   // no usable kernel stamp: after the read, never early
        for (auto &p : c.pk) {
            int code = l.core.arrive(p.first, p.second >= 0 ? p.second : seen);
            if (code == DROP_LOSS || code == DROP_QUEUE) {
                put_verdict(l.verdicts, l.qnum, p.first, NF_DROP, false);
                l.stash.erase(p.first);
            } else if (code == HOLD) l.stash.erase(p.first);
        }
        release_lane(l, now);
        rearm();
    }

    json stats() {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        std::map<int, std::pair<long, long>> kq;    // queue -> (queue_dropped, user_dropped)
        std::ifstream f("/proc/net/netfilter/nfnetlink_queue");
        std::string line;
        while (std::getline(f, line)) {
            std::istringstream is(line);
            long v[8];
            int k = 0;
            while (k < 8 && (is >> v[k])) k++;
            if (k == 8) kq[(int)v[0]] = {v[5], v[6]};
        }
        json dirs = json::array();
        for (int i = 0; i < 2; i++) {
            Lane &l = lanes[i];
            json extra = {{"queue", l.qnum}, {"gso", l.gso}, {"copy_packet", l.copy},
                          {"limit", l.core.limit}, {"reorder", l.core.reorder},
                          {"netlink_errors", l.errors}, {"kernel_tstamps", l.tstamp_used},
                          {"read_stamped", l.read_stamped}, {"lead_us", 0.0},
                          {"wakeups", l.wakeups}, {"recvs", l.recvs}, {"messages", l.msgs},
                          {"verdict_sends", l.sends}};
            json d = l.core.report(l.name, extra);
            auto it = kq.find(l.qnum);
            d["nfq_queue_dropped"] = it == kq.end() ? json(nullptr) : json(it->second.first);
            d["nfq_user_dropped"] = it == kq.end() ? json(nullptr) : json(it->second.second);
            d["wire"] = l.core.d.jitter_s > 0 ? json(nullptr) : audit.read(i);
            dirs.push_back(d);
        }
        double run = 0, wait = 0;
        bool have_sched = false;
        {
            std::ifstream s("/proc/thread-self/schedstat");
            long long a, b;
            if (s >> a >> b) { run = a / 1e9; wait = b / 1e9; have_sched = true; }
        }
        double steal = -1;
        {
            std::ifstream s("/proc/stat");
            std::string cpu;
            long long v[8];
            if (s >> cpu) {
                int k = 0;
                while (k < 8 && (s >> v[k])) k++;
                if (k == 8) steal = v[7] / (double)sysconf(_SC_CLK_TCK);
            }
        }
        double up = (mono_ns() - started) * 1e-9;
        json wh = json::array();
        for (int i = 0; i < NBINS; i++) wh.push_back(wake_hist[i]);
        return {{"stats_version", 2}, {"backend", "userspace"}, {"alive", true},
                {"error", nullptr}, {"instance", getpid()},
                {"cpu_user_s", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6},
                {"cpu_sys_s", ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6},
                {"run_s", have_sched ? json(run) : json(nullptr)},
                {"run_wait_s", have_sched ? json(wait) : json(nullptr)},
                {"wall_s", up}, {"steal_s", steal < 0 ? json(nullptr) : json(steal)},
                {"directions", dirs},
                {"extra", {{"engine", "native"}, {"uptime_s", up},
                           {"arrival_stamp", stamp_note}, {"lead_s", 0.0},
                           {"wake_compensation_s", comp.value}, {"send_lag_s", 0.0},
                           {"timer_wakeups", timer_wakeups},
                           {"timing", {{"rt", rt_note}, {"spins", spins},
                                       {"early_wakeups", early_wakeups},
                                       {"batch_us", batch_s * 1e6}, {"hold_us", 0.0},
                                       {"wake_hist", wh}}},
                           {"profile", profile.raw}}}};
    }

    json handle(const json &req) {
        std::string op = req.is_object() && req.contains("op") && req["op"].is_string()
                             ? req["op"].get<std::string>() : "";
        if (op == "ping") return {{"ok", true}, {"pid", getpid()}};
        if (op == "stats") return {{"ok", true}, {"stats", stats()}};
        if (op == "configure") {
            Profile p = parse_profile(req.at("profile"));
            for (auto &l : lanes) on_readable(l);    // packets read while waiting: old profile
            set_profile(p);
            const Dir *ds[2] = {&p.fwd, &p.rev};
            for (int i = 0; i < 2; i++) lane_mode(lanes[i], !ds[i]->per_segment(), ds[i]->duplicate > 0);
            rearm();
            return {{"ok", true}};
        }
        json opj = req.is_object() && req.contains("op") ? req["op"] : json(nullptr);
        return {{"ok", false}, {"error", "unknown op " + opj.dump()}};
    }

    void on_client(int fd) {
        char buf[65536];
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n <= 0) {
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
            epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
            close(fd);
            clients.erase(fd);
            return;
        }
        std::string &in = clients[fd];
        in.append(buf, n);
        size_t nl;
        while ((nl = in.find('\n')) != std::string::npos) {
            std::string line = in.substr(0, nl);
            in.erase(0, nl + 1);
            json ans;
            try {
                ans = handle(json::parse(line));
            } catch (const std::exception &e) {     // a bad request must not stop the engine
                ans = {{"ok", false}, {"error", std::string("ValueError: ") + e.what()}};
            }
            std::string out = ans.dump() + "\n";
            size_t off = 0;
            while (off < out.size()) {
                ssize_t w = send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
                if (w < 0) { if (errno == EAGAIN || errno == EINTR) { usleep(100); continue; } break; }
                off += w;
            }
        }
    }

    void add(int fd) {
        struct epoll_event ev = {};
        ev.events = EPOLLIN;
        ev.data.fd = fd;
        epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    }

    int run() {
        prctl_slack();
        struct sched_param sp = {};
        sp.sched_priority = 10;
        if (sched_setscheduler(0, SCHED_FIFO, &sp) == 0) rt_note = "engine SCHED_FIFO 10";
        else rt_note = std::string("not permitted (") + strerror(errno) + "); engine at normal priority";
        printf("engine: native %s\n", rt_note.c_str());
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigprocmask(SIG_BLOCK, &mask, nullptr);
        sfd = signalfd(-1, &mask, SFD_CLOEXEC);
        tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        epfd = epoll_create1(EPOLL_CLOEXEC);
        lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        struct sockaddr_un sa = {};
        sa.sun_family = AF_UNIX;
        strncpy(sa.sun_path, control_path.c_str(), sizeof(sa.sun_path) - 1);
        unlink(control_path.c_str());
        if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 16) < 0) {
            fprintf(stderr, "engine: cannot start: control %s: %s\n", control_path.c_str(), strerror(errno));
            return 1;
        }
        for (auto &l : lanes) add(mnl_socket_get_fd(l.nl));
        add(tfd);
        add(lfd);
        add(sfd);
        started = mono_ns();
        printf("engine: ready pid=%d queues=[%u, %u] (native)\n", getpid(), lanes[0].qnum, lanes[1].qnum);
        fflush(stdout);
        struct epoll_event evs[16];
        while (!stop) {
            int n = epoll_wait(epfd, evs, 16, -1);
            if (n < 0) { if (errno == EINTR) continue; break; }
            for (int i = 0; i < n; i++) {
                int fd = evs[i].data.fd;
                if (fd == tfd) on_timer();
                else if (fd == sfd) stop = true;
                else if (fd == lfd) {
                    int c;
                    while ((c = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
                        clients[c] = "";
                        add(c);
                    }
                } else if (fd == mnl_socket_get_fd(lanes[0].nl)) on_readable(lanes[0]);
                else if (fd == mnl_socket_get_fd(lanes[1].nl)) on_readable(lanes[1]);
                else on_client(fd);
            }
        }
        // the kernel drops what was held when the queues close: never undelayed
        for (auto &l : lanes) mnl_socket_close(l.nl);
        unlink(control_path.c_str());
        printf("engine: stopped\n");
        fflush(stdout);
        return 0;
    }
    static void prctl_slack();
};

#include <sys/prctl.h>
void Engine::prctl_slack() { prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); }

// ---- simulate: the core driven from stdin (unit tests) -----------------------------------
// Commands, one a line, times in ns of a made-up clock:
//   profile <json>            configure both directions
//   arrive <dir> <id> <t>     -> "<code>"
//   burst <dir> <n> <t0> <dt> -> "<hold> <loss> <queue> <dup>" (ids from a counter)
//   codes <dir> <n> <t0> <dt> -> one digit per packet (its arrive code)
//   release <dir> <upto> <sent> -> "<id> <id> ..." (dups marked with a trailing *)
//   next <dir>                -> deadline or "none"
//   stats                     -> the stats JSON directions
static int simulate(Engine &e) {
    std::string line;
    uint32_t next_id = 1;
    while (std::getline(std::cin, line)) {
        std::istringstream is(line);
        std::string cmd;
        is >> cmd;
        try {
            if (cmd == "profile") {
                std::string rest;
                std::getline(is, rest);
                e.set_profile(parse_profile(json::parse(rest)));
                std::cout << "ok\n";
            } else if (cmd == "arrive") {
                int d; uint32_t id; ns_t t;
                is >> d >> id >> t;
                std::cout << e.lanes[d].core.arrive(id, t) << "\n";
            } else if (cmd == "burst") {
                int d; long n; ns_t t0, dt;
                is >> d >> n >> t0 >> dt;
                long c[4] = {0, 0, 0, 0};
                for (long i = 0; i < n; i++) c[e.lanes[d].core.arrive(next_id++, t0 + i * dt)]++;
                std::cout << c[HOLD] << " " << c[DROP_LOSS] << " " << c[DROP_QUEUE] << " " << c[HOLD_DUP] << "\n";
            } else if (cmd == "codes") {
                int d; long n; ns_t t0, dt;
                is >> d >> n >> t0 >> dt;
                std::string out((size_t)n, '0');
                for (long i = 0; i < n; i++) out[i] = (char)('0' + e.lanes[d].core.arrive(next_id++, t0 + i * dt));
                std::cout << out << "\n";
            } else if (cmd == "release") {
                int d; ns_t upto, sent;
                is >> d >> upto >> sent;
                std::vector<Held> out;
                e.lanes[d].core.take(upto, out);
                e.lanes[d].core.account(out, sent);
                std::ostringstream os;
                for (auto &h : out) os << h.id << (h.dup ? "* " : " ");
                std::string s = os.str();
                if (!s.empty()) s.pop_back();
                std::cout << s << "\n";
            } else if (cmd == "next") {
                int d; ns_t x;
                is >> d;
                if (e.lanes[d].core.next_deadline(x)) std::cout << x << "\n"; else std::cout << "none\n";
            } else if (cmd == "stats") {
                json dirs = json::array();
                for (auto &l : e.lanes)
                    dirs.push_back(l.core.report(l.name, {{"reorder", l.core.reorder}, {"limit", l.core.limit}}));
                std::cout << dirs.dump() << "\n";
            } else if (!cmd.empty()) {
                std::cout << "error unknown command " << cmd << "\n";
            }
        } catch (const std::exception &ex) {
            std::cout << "error " << ex.what() << "\n";
        }
        std::cout.flush();
    }
    return 0;
}

static void usage() {
    fprintf(stderr, "usage: rig-emul-engine --queues FWD REV --control SOCK --profile JSON "
                    "[--seed N] [--stamp-ifs CLIENT_IF SERVER_IF] [--bpf-maps CFG STATS] "
                    "[--stamp-note TEXT] | --simulate [--seed N]\n");
}

int main(int argc, char **argv) {
    std::vector<std::string> a(argv + 1, argv + argc);
    long q[2] = {-1, -1}, seed = -1;
    std::string control, profile_path, ifs[2], note;
    int maps[2] = {-1, -1};
    bool sim = false, have_ifs = false;
    try {
        for (size_t i = 0; i < a.size(); i++) {
            auto need = [&](size_t k) {
                if (i + k >= a.size()) throw std::runtime_error(a[i] + ": missing value");
            };
            if (a[i] == "--queues") { need(2); q[0] = std::stol(a[i + 1]); q[1] = std::stol(a[i + 2]); i += 2; }
            else if (a[i] == "--control") { need(1); control = a[++i]; }
            else if (a[i] == "--profile") { need(1); profile_path = a[++i]; }
            else if (a[i] == "--seed") { need(1); seed = std::stol(a[++i]); }
            else if (a[i] == "--stamp-ifs") { need(2); ifs[0] = a[i + 1]; ifs[1] = a[i + 2]; have_ifs = true; i += 2; }
            else if (a[i] == "--bpf-maps") { need(2); maps[0] = std::stoi(a[i + 1]); maps[1] = std::stoi(a[i + 2]); i += 2; }
            else if (a[i] == "--stamp-note") { need(1); note = a[++i]; }
            else if (a[i] == "--simulate") sim = true;
            else if (a[i] == "-h" || a[i] == "--help") { usage(); return 0; }
            else throw std::runtime_error("unknown argument " + a[i]);
        }
    } catch (const std::exception &e) {
        fprintf(stderr, "engine: %s\n", e.what());
        usage();
        return 2;
    }
    static Engine e;
    e.rng.seed(seed >= 0 ? (uint64_t)seed : std::random_device{}());
    e.lanes[0].name = "forward";
    e.lanes[1].name = "reverse";
    for (int i = 0; i < 2; i++) { e.lanes[i].index = i; e.lanes[i].core.rng = &e.rng; }
    if (sim) {
        Profile p;
        p.raw = json::object();
        e.set_profile(p);
        return simulate(e);
    }
    if (q[0] < 0 || control.empty() || profile_path.empty()) { usage(); return 2; }
    try {
        std::ifstream f(profile_path);
        if (!f) throw std::runtime_error(profile_path + ": cannot read");
        json pj = json::parse(f);
        if (maps[0] >= 0) { e.audit.cfg = maps[0]; e.audit.stats = maps[1]; e.audit.ncpu = possible_cpus(); }
        Profile p = parse_profile(pj);
        e.set_profile(p);
        const Dir *ds[2] = {&p.fwd, &p.rev};
        for (int i = 0; i < 2; i++) {
            e.lanes[i].qnum = (uint16_t)q[i];
            e.lanes[i].gso = !ds[i]->per_segment();
            e.lanes[i].copy = ds[i]->duplicate > 0;
            lane_open(e.lanes[i]);
        }
    } catch (const std::exception &ex) {
        fprintf(stderr, "engine: cannot start: %s\n", ex.what());
        return 1;
    }
    e.control_path = control;
    if (!note.empty()) e.stamp_note = note;
    else if (e.audit.on())
        e.stamp_note = have_ifs ? "tcx-ingress eBPF on " + ifs[0] + "," + ifs[1] +
                                      " (CLOCK_MONOTONIC), audited at tcx-egress"
                                : "tcx-ingress eBPF (CLOCK_MONOTONIC), audited at tcx-egress";
    else e.stamp_note = "read time (no stamp interfaces: an end host or a test)";
    printf("engine: arrival stamps: %s\n", e.stamp_note.c_str());
    fflush(stdout);
    return e.run();
}
