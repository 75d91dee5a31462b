// rcoll-loopback-floor: what one frame costs on a bare TCP socket pair over
// loopback, with no library in the way. The floor under the 2-rank 4 KiB
// broadcast over TCP (bench/RESULTS.md, stop 29).
//
// A sender process writes COUNT frames of SIZE bytes back to back, one
// blocking send() each (TCP_NODELAY, as every library here sets); a receiver
// process polls recv(MSG_DONTWAIT) into a 32 KiB buffer, yielding between
// polls, as rcoll's TCP transport does. On loopback the receiver's TCP input
// runs in the sender's send() when the receiver keeps up, so the sender's
// time per frame is the whole path. With --slow-reader US the receiver sleeps
// US microseconds after every read: it falls behind, the socket fills, and
// the sender's frames leave in large segments later (the regime in which
// Open MPI's benchmark runs, stop 19). The sleep is at least US: the kernel's
// timer slack (50 us by default) adds to it.
//
//   rcoll-loopback-floor [--size BYTES] [--count N] [--sockbuf BYTES] [--slow-reader US]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  size_t size = 4096 + 64;  // a 4 KiB payload and a frame header's worth
  size_t count = 20000;
  int sockbuf = 4 << 20;  // what rcoll asks for; 0 leaves the kernel's autotuning
  int slow_reader_us = 0;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "rcoll-loopback-floor: %s\nusage: rcoll-loopback-floor [--size BYTES] [--count N] "
               "[--sockbuf BYTES] [--slow-reader US]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    char* end = nullptr;
    const long v = std::strtol(argv[++i], &end, 10);
    if (*end != '\0' || v < 0) usage(("bad value for " + flag).c_str());
    if (flag == "--size" && v > 0) {
      a.size = size_t(v);
    } else if (flag == "--count" && v > 0) {
      a.count = size_t(v);
    } else if (flag == "--sockbuf") {
      a.sockbuf = int(v);
    } else if (flag == "--slow-reader") {
      a.slow_reader_us = int(v);
    } else {
      usage(("unknown or out-of-range option " + flag).c_str());
    }
  }
  return a;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "rcoll-loopback-floor: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

void tune(int fd, const Args& a) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (a.sockbuf > 0) {
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &a.sockbuf, sizeof a.sockbuf);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &a.sockbuf, sizeof a.sockbuf);
  }
}

// What the kernel made of the request: it doubles it and caps it at
// net.core.wmem_max / rmem_max.
int buffer_size(int fd, int which) {
  int v = 0;
  socklen_t len = sizeof v;
  getsockopt(fd, SOL_SOCKET, which, &v, &len);
  return v;
}

// The receiver: reads until every byte is in, then sends one byte back.
[[noreturn]] void receive(const sockaddr_in& addr, const Args& a) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  tune(fd, a);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) die("connect");
  std::vector<char> buf(32 << 10);
  const size_t total = a.size * a.count;
  size_t got = 0, calls = 0;
  while (got < total) {
    const ssize_t k = recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (k > 0) {
      got += size_t(k);
      ++calls;
      if (a.slow_reader_us > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(a.slow_reader_us));
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      sched_yield();
    } else if (k == 0) {
      std::fprintf(stderr, "rcoll-loopback-floor: the sender closed after %zu of %zu bytes\n", got,
                   total);
      std::exit(1);
    } else {
      die("recv");
    }
  }
  const char done = 1;
  if (send(fd, &done, 1, MSG_NOSIGNAL) != 1) die("send (done)");
  std::printf("receiver: %.2f reads per frame\n", double(calls) / double(a.count));
  std::exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    die("listen on 127.0.0.1");
  }
  std::fflush(stdout);
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) receive(addr, a);

  // The receiver connects at once; if it failed first, do not wait forever.
  pollfd ready{listener, POLLIN, 0};
  if (poll(&ready, 1, 10000) != 1) {
    std::fprintf(stderr, "rcoll-loopback-floor: the receiver did not connect within 10 s\n");
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    return 1;
  }
  const int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) die("accept");
  tune(fd, a);
  std::vector<char> frame(a.size, 'x');
  std::vector<double> us(a.count);
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < a.count; ++i) {
    const Clock::time_point t0 = Clock::now();
    size_t sent = 0;
    while (sent < a.size) {
      const ssize_t k = send(fd, frame.data() + sent, a.size - sent, MSG_NOSIGNAL);
      if (k < 0 && errno != EINTR) die("send");
      if (k > 0) sent += size_t(k);
    }
    us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  const Clock::time_point sent_all = Clock::now();
  char done = 0;
  if (recv(fd, &done, 1, MSG_WAITALL) != 1) die("recv (done)");
  const Clock::time_point received_all = Clock::now();
  int status = 0;
  waitpid(child, &status, 0);

  std::sort(us.begin(), us.end());
  const double n = double(a.count);
  auto per_frame = [&](Clock::time_point end) {
    return std::chrono::duration<double, std::micro>(end - start).count() / n;
  };
  std::printf(
      "sender: %zu frames of %zu B, socket buffers %d B asked, %d/%d B given (send/receive)%s: "
      "send() median %.2f us, loop %.2f us per frame, until the receiver had all %.2f us per "
      "frame\n",
      a.count, a.size, a.sockbuf, buffer_size(fd, SO_SNDBUF), buffer_size(fd, SO_RCVBUF),
      a.slow_reader_us > 0 ? " (slow reader)" : "", us[us.size() / 2], per_frame(sent_all),
      per_frame(received_all));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
