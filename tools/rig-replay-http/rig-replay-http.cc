// rig-replay-http: execute a caching-mode read plan over HTTP with the real client
// libraries CMSSW's plugins use: libdavix (DavPosix pread for one range, preadVec for a
// vector read: multi-range requests, as Utilities/DavixAdaptor's DavixFile::readv) or
// libcurl (one Range GET per request, up to the round's window in flight).
//
// Usage: rig-replay-http --library davix|curl --url http://HOST:PORT/PATH --plan FILE
//                        --timeout SECONDS [--shadow DIR]
// --shadow DIR (lazy-download): the bytes go into an unlinked shadow file in DIR, as
// LocalCacheFile's; its checksum is read back after the replay, outside wall_s.
// The plan (written by rig.services.replay.planjson) is JSON:
//   {"version": 1, "rounds": [[window, [[off, len], ...], [[off, len], ...]], ...]}
// a round is its window (max requests in flight, 0 = all) then its requests, each a
// list of (offset, length) ranges. Rounds run one after another (synchronously).
// Prints one JSON line: wall_s, open_s, rounds, http_requests, bytes_received,
// cpu_user_s, cpu_sys_s (getrusage of this process, libraries' threads included, replay
// phase only), cpu_wait_s (its threads' time runnable but waiting in a run queue for a
// CPU over the replay, from schedstat; null where the kernel has none), round_s, checksum
// (crc32 of every range's bytes in plan order).
// Exit 0 ok, 1 failed, 2 bad usage, 4 deadline (SIGALRM).
// rig's own code; nothing copied from CMSSW.
#include <curl/curl.h>
#include <davix.hpp>
#include <zlib.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Range { long long off, len; };
struct Request { std::vector<Range> ranges; };
struct Round { long long window; std::vector<Request> requests; };

[[noreturn]] void die(int code, const std::string &msg) {
  std::fprintf(stderr, "rig-replay-http: %s\n", msg.c_str());
  std::fflush(stderr);
  std::exit(code);
}

void on_alarm(int) {
  static const char m[] = "rig-replay-http: deadline passed with requests in flight\n";
  ssize_t w = write(2, m, sizeof(m) - 1);
  (void)w;
  _exit(4);
}

// ---- a minimal JSON reader: numbers, arrays, objects with string keys -------------
struct Value {
  enum Kind { Num, Arr, Obj, Str } kind = Num;
  long long num = 0;
  std::string str;
  std::vector<Value> items;
  std::map<std::string, Value> fields;
};

class Reader {
 public:
  explicit Reader(const std::string &s) : s_(s) {}
  Value parse() {
    Value v = value();
    ws();
    if (i_ != s_.size()) fail("trailing data");
    return v;
  }

 private:
  const std::string &s_;
  size_t i_ = 0;
  [[noreturn]] void fail(const char *what) {
    die(2, std::string("plan: ") + what + " at byte " + std::to_string(i_));
  }
  void ws() { while (i_ < s_.size() && std::isspace((unsigned char)s_[i_])) ++i_; }
  char peek() { ws(); if (i_ >= s_.size()) fail("unexpected end"); return s_[i_]; }
  void expect(char c) { if (peek() != c) fail("unexpected character"); ++i_; }
  std::string string() {
    expect('"');
    size_t j = s_.find('"', i_);
    if (j == std::string::npos) fail("unterminated string");
    std::string out = s_.substr(i_, j - i_);
    i_ = j + 1;
    return out;
  }
  Value value() {
    Value v;
    char c = peek();
    if (c == '[') {
      v.kind = Value::Arr;
      ++i_;
      if (peek() == ']') { ++i_; return v; }
      for (;;) {
        v.items.push_back(value());
        if (peek() == ',') { ++i_; continue; }
        expect(']');
        return v;
      }
    }
    if (c == '{') {
      v.kind = Value::Obj;
      ++i_;
      if (peek() == '}') { ++i_; return v; }
      for (;;) {
        std::string k = string();
        expect(':');
        v.fields[k] = value();
        if (peek() == ',') { ++i_; continue; }
        expect('}');
        return v;
      }
    }
    if (c == '"') { v.kind = Value::Str; v.str = string(); return v; }
    if (c == '-' || std::isdigit((unsigned char)c)) {
      size_t j = i_ + 1;
      while (j < s_.size() && std::isdigit((unsigned char)s_[j])) ++j;
      v.num = std::stoll(s_.substr(i_, j - i_));
      i_ = j;
      return v;
    }
    fail("unexpected value");
  }
};

std::vector<Round> load_plan(const std::string &path) {
  std::ifstream in(path);
  if (!in) die(2, "cannot read plan " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  Value root = Reader(text).parse();
  auto it = root.fields.find("rounds");
  if (root.kind != Value::Obj || it == root.fields.end() || it->second.kind != Value::Arr)
    die(2, "plan: no \"rounds\" list");
  std::vector<Round> out;
  for (const Value &r : it->second.items) {
    if (r.kind != Value::Arr || r.items.empty()) die(2, "plan: a round is [window, requests...]");
    Round rnd{r.items[0].num, {}};
    for (size_t k = 1; k < r.items.size(); ++k) {
      Request q;
      for (const Value &p : r.items[k].items) {
        if (p.kind != Value::Arr || p.items.size() != 2 || p.items[0].num < 0 || p.items[1].num <= 0)
          die(2, "plan: a range is [offset, length > 0]");
        q.ranges.push_back({p.items[0].num, p.items[1].num});
      }
      if (q.ranges.empty()) die(2, "plan: a request without ranges");
      rnd.requests.push_back(q);
    }
    if (rnd.requests.empty()) die(2, "plan: a round without requests");
    out.push_back(rnd);
  }
  return out;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ---- where a round's bytes go ------------------------------------------------------
// In memory (application, storage: ROOT's buffers), or, with --shadow DIR, straight into
// a local shadow file as CMSSW's LocalCacheFile::cache does for lazy-download: an
// unlinked temporary file in DIR the size of the remote file, each round's span mapped
// MAP_SHARED and the remote bytes read into the mapping (so the page cache of DIR's
// file system takes every byte while the socket is being read).
class Dest {
 public:
  Dest(const Round &r, int shadow_fd) : fd_(shadow_fd) {
    ptr_.resize(r.requests.size());
    if (fd_ < 0) {
      bufs_.resize(r.requests.size());
      for (size_t k = 0; k < r.requests.size(); ++k) {
        long long total = 0;
        for (const Range &x : r.requests[k].ranges) total += x.len;
        bufs_[k].resize(total);
        long long at = 0;
        for (const Range &x : r.requests[k].ranges) {
          ptr_[k].push_back(bufs_[k].data() + at);
          at += x.len;
        }
      }
      return;
    }
    long long lo = -1, hi = 0, page = sysconf(_SC_PAGESIZE);
    for (const Request &q : r.requests)
      for (const Range &x : q.ranges) {
        lo = lo < 0 ? x.off : std::min(lo, x.off);
        hi = std::max(hi, x.off + x.len);
      }
    lo_ = lo / page * page;
    len_ = hi - lo_;
    struct stat st;
    if (fstat(fd_, &st) != 0 || st.st_size < hi)
      if (ftruncate(fd_, hi) != 0) die(1, std::string("shadow: ftruncate: ") + std::strerror(errno));
    map_ = static_cast<char *>(mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, lo_));
    if (map_ == MAP_FAILED) die(1, std::string("shadow: mmap: ") + std::strerror(errno));
    for (size_t k = 0; k < r.requests.size(); ++k)
      for (const Range &x : r.requests[k].ranges) ptr_[k].push_back(map_ + (x.off - lo_));
  }
  ~Dest() { unmap(); }
  void unmap() {                        // LocalCacheFile::cache unmaps before it returns
    if (map_ && map_ != MAP_FAILED) munmap(map_, len_);
    map_ = nullptr;
  }
  Dest(const Dest &) = delete;
  Dest &operator=(const Dest &) = delete;
  char *at(size_t request, size_t range) { return ptr_[request][range]; }
  // crc32 of the round's ranges in plan order (memory mode only: a shadow file is
  // checksummed after the replay, outside its wall)
  uLong crc(uLong c, long long &received) const {
    for (const auto &b : bufs_) {
      c = crc32(c, reinterpret_cast<const Bytef *>(b.data()), (uInt)b.size());
      received += (long long)b.size();
    }
    return c;
  }

 private:
  int fd_;
  std::vector<std::vector<char>> bufs_;
  std::vector<std::vector<char *>> ptr_;
  char *map_ = nullptr;
  long long lo_ = 0, len_ = 0;
};

// ---- libcurl ----------------------------------------------------------------------
struct Sink { char *buf; long long want, got; };

size_t curl_write(char *data, size_t sz, size_t n, void *user) {
  Sink *s = static_cast<Sink *>(user);
  long long len = (long long)(sz * n);
  if (s->got + len > s->want) return 0;              // more than asked: abort the transfer
  std::memcpy(s->buf + s->got, data, len);
  s->got += len;
  return sz * n;
}

class CurlClient {
 public:
  CurlClient(const std::string &url, double deadline, const std::string &cafile)
      : url_(url), cafile_(cafile), deadline_(deadline) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) die(1, "curl_global_init failed");
    multi_ = curl_multi_init();
  }
  ~CurlClient() {
    for (CURL *e : pool_) curl_easy_cleanup(e);
    curl_multi_cleanup(multi_);
  }
  long long http_requests = 0;

  // One round: its single-range requests, at most `window` in flight (0 = all). Each
  // easy handle keeps its connection (keep-alive) for later rounds.
  void round(const Round &r, Dest &dst) {
    size_t n = r.requests.size(), window = r.window > 0 ? (size_t)r.window : n;
    while (pool_.size() < std::min(window, n)) pool_.push_back(curl_easy_init());
    std::vector<Sink> sinks(n);
    std::vector<CURL *> free_(pool_.begin(), pool_.begin() + std::min(window, n));
    std::map<CURL *, size_t> busy;
    size_t next = 0, done = 0;
    while (done < n) {
      while (next < n && !free_.empty()) {
        const Request &q = r.requests[next];
        if (q.ranges.size() != 1) die(1, "curl: vector reads are not replayed with libcurl");
        CURL *e = free_.back();
        free_.pop_back();
        sinks[next] = {dst.at(next, 0), q.ranges[0].len, 0};
        std::string rng = std::to_string(q.ranges[0].off) + "-" +
                          std::to_string(q.ranges[0].off + q.ranges[0].len - 1);
        long left_ms = (long)std::max(1.0, (deadline_ - now()) * 1000);
        curl_easy_setopt(e, CURLOPT_URL, url_.c_str());
        curl_easy_setopt(e, CURLOPT_RANGE, rng.c_str());
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, curl_write);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &sinks[next]);
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, left_ms);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, std::min(left_ms, 10000L));
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
        if (!cafile_.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, cafile_.c_str());  // only the run's CA
        curl_multi_add_handle(multi_, e);
        busy[e] = next++;
        ++http_requests;
      }
      int running = 0;
      curl_multi_perform(multi_, &running);
      CURLMsg *m;
      int q;
      while ((m = curl_multi_info_read(multi_, &q))) {
        if (m->msg != CURLMSG_DONE) continue;
        CURL *e = m->easy_handle;
        size_t i = busy[e];
        long code = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
        if (m->data.result != CURLE_OK)
          die(1, std::string("curl: ") + curl_easy_strerror(m->data.result));
        if (code != 206) die(1, "curl: HTTP " + std::to_string(code) + " for a range request");
        if (sinks[i].got != sinks[i].want)
          die(1, "curl: short answer (" + std::to_string(sinks[i].got) + " of " +
                     std::to_string(sinks[i].want) + " bytes)");
        curl_multi_remove_handle(multi_, e);
        busy.erase(e);
        free_.push_back(e);
        ++done;
      }
      if (done < n) curl_multi_poll(multi_, nullptr, 0, 100, nullptr);
    }
  }

 private:
  std::string url_;
  std::string cafile_;            // https: the only CA trusted (empty: plain http)
  double deadline_;
  CURLM *multi_;
  std::vector<CURL *> pool_;
};

// ---- libdavix ---------------------------------------------------------------------
long long g_davix_requests = 0;

bool g_debug = false;   // $RIG_REPLAY_HTTP_DEBUG: davix's header log on stderr

void davix_log(void *, int, const char *msg) {
  // with DAVIX_LOG_HEADER each request line is logged as "> GET /path HTTP/1.1"
  if (msg && std::strstr(msg, "> GET ")) ++g_davix_requests;
  if (g_debug && msg) std::fprintf(stderr, "davix: %s\n", msg);
}

class DavixClient {
 public:
  DavixClient(const std::string &url, double timeout, const std::string &capath) : posix_(&ctx_) {
    davix_set_log_handler(davix_log, nullptr);
    davix_set_log_level(DAVIX_LOG_HEADER);
    struct timespec t{(time_t)std::ceil(timeout), 0}, c{(time_t)std::min(timeout, 10.0) + 1, 0};
    params_.setOperationTimeout(&t);
    params_.setConnectionTimeout(&c);
    params_.setOperationRetry(0);
    params_.setKeepAlive(true);
    if (!capath.empty()) params_.addCertificateAuthorityPath(capath);   // the run's CA, verified
    Davix::DavixError *err = nullptr;
    fd_ = posix_.open(&params_, url, O_RDONLY, &err);
    if (err || !fd_) die(1, "davix: cannot open " + url + ": " + (err ? err->getErrMsg() : "no fd"));
    posix_.fadvise(fd_, 0, 0, Davix::AdviseRandom);   // as DavixFile::read
  }
  ~DavixClient() {
    Davix::DavixError *err = nullptr;
    posix_.close(fd_, &err);
    delete err;
  }

  // A round of one single-range request is one pread; anything else is one preadVec
  // of all the round's ranges (DavixFile::readv: libdavix packs and splits them into
  // multi-range GETs itself).
  void round(const Round &r, Dest &dst) {
    Davix::DavixError *err = nullptr;
    std::vector<Davix::DavIOVecInput> in;
    for (size_t k = 0; k < r.requests.size(); ++k)
      for (size_t j = 0; j < r.requests[k].ranges.size(); ++j) {
        const Range &x = r.requests[k].ranges[j];
        in.push_back({dst.at(k, j), (dav_off_t)x.off, (dav_size_t)x.len});
      }
    if (in.size() == 1) {
      ssize_t s = posix_.pread64(fd_, in[0].diov_buffer, in[0].diov_size, in[0].diov_offset, &err);
      check(err, s, (long long)in[0].diov_size, "pread");
      return;
    }
    std::vector<Davix::DavIOVecOuput> out(in.size());
    dav_ssize_t s = posix_.preadVec(fd_, in.data(), out.data(), (dav_size_t)in.size(), &err);
    // libdavix's return value can be a byte short when it coalesced touching ranges
    // (DavixFile::readv does not check it either): every range's own answer is checked
    if (err) die(1, std::string("davix: preadVec: ") + err->getErrMsg());
    if (s <= 0) die(1, "davix: preadVec returned " + std::to_string(s));
    for (size_t k = 0; k < in.size(); ++k)
      if (out[k].diov_size != (dav_ssize_t)in[k].diov_size)
        die(1, "davix: preadVec answered " + std::to_string(out[k].diov_size) + " of " +
                   std::to_string(in[k].diov_size) + " bytes for a range");
  }

 private:
  static void check(Davix::DavixError *err, long long s, long long want, const char *what) {
    if (err) die(1, std::string("davix: ") + what + ": " + err->getErrMsg());
    if (s != want)
      die(1, std::string("davix: ") + what + " returned " + std::to_string(s) + " of " +
                 std::to_string(want) + " bytes");
  }
  Davix::Context ctx_;
  Davix::DavPosix posix_;
  Davix::RequestParams params_;
  DAVIX_FD *fd_ = nullptr;
};

// Nanoseconds this process's threads have been runnable but waiting in a run queue (the
// 2nd field of /proc/self/task/TID/schedstat, the scheduler's own clock); -1 when the
// kernel shows none. A thread that ends before the second reading takes its wait along.
long long run_wait_ns() {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  long long sum = 0;
  bool any = false;
  while (struct dirent *e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string p = std::string("/proc/self/task/") + e->d_name + "/schedstat";
    FILE *f = std::fopen(p.c_str(), "r");
    if (!f) continue;
    unsigned long long run = 0, wait = 0;
    if (std::fscanf(f, "%llu %llu", &run, &wait) == 2) {
      sum += (long long)wait;
      any = true;
    }
    std::fclose(f);
  }
  closedir(d);
  return any ? sum : -1;
}

double cpu(const struct rusage &u, bool user) {
  const struct timeval &t = user ? u.ru_utime : u.ru_stime;
  return t.tv_sec + t.tv_usec / 1e6;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("davix %s, libcurl %s\n", Davix::version().c_str(),
                curl_version_info(CURLVERSION_NOW)->version);
    return 0;
  }
  std::map<std::string, std::string> a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || i + 1 >= argc) die(2, "usage: --library davix|curl --url URL --plan FILE --timeout S [--shadow DIR] [--capath DIR] [--cafile PEM]");
    a[k.substr(2)] = argv[++i];
  }
  for (const auto &kv : a)
    if (kv.first != "library" && kv.first != "url" && kv.first != "plan" &&
        kv.first != "timeout" && kv.first != "shadow" && kv.first != "capath" &&
        kv.first != "cafile")
      die(2, "unknown option --" + kv.first);
  for (const char *k : {"library", "url", "plan", "timeout"})
    if (!a.count(k)) die(2, std::string("missing --") + k);
  const std::string lib = a["library"], url = a["url"];
  if (lib != "davix" && lib != "curl") die(2, "--library must be davix or curl (got " + lib + ")");
  const bool tls = url.rfind("https://", 0) == 0;
  if (url.rfind("http://", 0) != 0 && !tls) die(2, "only http:// and https:// URLs (got " + url + ")");
  if (tls && !a.count(lib == "curl" ? "cafile" : "capath"))
    die(2, std::string("https:// needs the CA to trust (--") + (lib == "curl" ? "cafile" : "capath") + ")");
  double timeout = std::atof(a["timeout"].c_str());
  if (!(timeout > 0)) die(2, "--timeout must be > 0 (got " + a["timeout"] + ")");
  std::vector<Round> plan = load_plan(a["plan"]);
  int shadow_fd = -1;
  if (a.count("shadow")) {             // as LocalCacheFile: mkstemp in the directory, unlink
    std::string pattern = a["shadow"] + "/rig-shadow-XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    shadow_fd = mkstemp(name.data());
    if (shadow_fd < 0) die(1, "shadow: cannot create " + pattern + ": " + std::strerror(errno));
    unlink(name.data());
  }
  g_debug = std::getenv("RIG_REPLAY_HTTP_DEBUG") != nullptr;

  signal(SIGALRM, on_alarm);
  alarm((unsigned)std::ceil(timeout) + 2);           // backstop: the libraries time out first
  double t_open = now(), deadline = t_open + timeout;

  std::unique_ptr<CurlClient> cc;
  std::unique_ptr<DavixClient> dc;
  if (lib == "curl") cc = std::make_unique<CurlClient>(url, deadline, a.count("cafile") ? a["cafile"] : "");
  else dc = std::make_unique<DavixClient>(url, timeout, a.count("capath") ? a["capath"] : "");

  struct rusage r0, r1;
  getrusage(RUSAGE_SELF, &r0);
  long long wait0 = run_wait_ns();
  double t0 = now();
  uLong crc = crc32(0L, Z_NULL, 0);
  long long received = 0;
  std::vector<double> times;
  for (const Round &r : plan) {
    double s = now();
    Dest dst(r, shadow_fd);
    if (cc) cc->round(r, dst); else dc->round(r, dst);
    dst.unmap();
    times.push_back(now() - s);
    crc = dst.crc(crc, received);       // memory mode: outside the round, inside the wall
  }
  double wall = now() - t0;
  long long wait1 = run_wait_ns();
  getrusage(RUSAGE_SELF, &r1);
  if (shadow_fd >= 0) {                 // the local copy, read back outside the wall
    std::vector<char> b;
    for (const Round &r : plan)
      for (const Request &q : r.requests)
        for (const Range &x : q.ranges) {
          b.resize(x.len);
          if (pread(shadow_fd, b.data(), x.len, x.off) != x.len)
            die(1, "shadow: short read back");
          crc = crc32(crc, reinterpret_cast<const Bytef *>(b.data()), (uInt)b.size());
          received += x.len;
        }
    close(shadow_fd);
  }
  long long http = cc ? cc->http_requests : g_davix_requests;
  cc.reset();
  dc.reset();
  alarm(0);

  char waits[32] = "null";
  if (wait0 >= 0 && wait1 >= wait0) std::snprintf(waits, sizeof waits, "%.6f", (wait1 - wait0) / 1e9);
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", (unsigned long)(crc & 0xffffffffUL));
  std::printf("{\"library\": \"%s\", \"library_version\": \"%s\", \"wall_s\": %.6f, \"open_s\": %.6f, "
              "\"rounds\": %zu, \"http_requests\": %lld, \"bytes_received\": %lld, "
              "\"cpu_user_s\": %.6f, \"cpu_sys_s\": %.6f, \"cpu_wait_s\": %s, \"checksum\": \"%s\", \"round_s\": [",
              lib.c_str(), cc || lib == "curl" ? curl_version_info(CURLVERSION_NOW)->version
                                                : Davix::version().c_str(),
              wall, t0 - t_open, plan.size(), http, received,
              cpu(r1, true) - cpu(r0, true), cpu(r1, false) - cpu(r0, false), waits, hex);
  for (size_t i = 0; i < times.size(); ++i) std::printf("%s%.6f", i ? ", " : "", times[i]);
  std::printf("]}\n");
  return 0;
}
