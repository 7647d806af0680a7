// The only C++ in Cohort: an extern "C" wrapper around libgloo's TCP transport and
// collectives. Every exception stops here and becomes a status and a message.
#include "engine/distributed/gloo-shim.h"
#include "kernels/math-inline.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/pair.h>

struct CohortGloo {
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
};

namespace
{

// A store failure carries its status through gloo back to our catch.
struct StoreFailure : public gloo::Exception {
  StoreFailure(int status, const std::string &msg) : gloo::Exception(msg), status(status)
  {
  }
  int status;
};

std::string take_message(char *err, const char *fallback)
{
  std::string s = err != nullptr ? err : fallback;
  free(err);
  return s;
}

// Our C store behind gloo's rendezvous::Store interface.
class CallbackStore : public gloo::rendezvous::Store
{
public:
  CallbackStore(const CohortGlooStoreOps &ops, long timeout_ms) : ops_(ops), timeout_ms_(timeout_ms)
  {
  }

  void set(const std::string &key, const std::vector<char> &data) override
  {
    char *err = nullptr;
    int st = ops_.set(ops_.user, key.c_str(), data.data(), data.size(), &err);
    if (st != 0)
      throw StoreFailure(st, take_message(err, "store set failed"));
  }

  std::vector<char> get(const std::string &key) override
  {
    void *data = nullptr;
    size_t len = 0;
    char *err = nullptr;
    int st = ops_.get(ops_.user, key.c_str(), &data, &len, timeout_ms_, &err);
    if (st != 0)
      throw StoreFailure(st, take_message(err, "store get failed"));
    std::vector<char> out(static_cast<char *>(data), static_cast<char *>(data) + len);
    free(data);
    return out;
  }

  void wait(const std::vector<std::string> &keys) override
  {
    wait(keys, std::chrono::milliseconds(timeout_ms_));
  }

  void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override
  {
    std::vector<const char *> ptrs;
    for (const auto &k : keys)
      ptrs.push_back(k.c_str());
    char *err = nullptr;
    long ms = timeout.count() > 0 ? static_cast<long>(timeout.count()) : timeout_ms_;
    int st = ops_.wait(ops_.user, ptrs.data(), ptrs.size(), ms, &err);
    if (st != 0)
      throw StoreFailure(st, take_message(err, "store wait failed"));
  }

private:
  CohortGlooStoreOps ops_;
  long timeout_ms_;
};

char *dup_message(const std::string &s)
{
  char *p = static_cast<char *>(malloc(s.size() + 1));
  if (p != nullptr)
    memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

// Gloo reports a timeout as an IoException whose text says so.
int classify(const std::string &what, int io_status)
{
  if (what.find("imed out") != std::string::npos || what.find("imeout") != std::string::npos)
    return COHORT_GLOO_TIMEOUT;
  return io_status;
}

// Runs fn, turning any exception into a status and *err.
template <typename F> int guarded(char **err, F fn)
{
  try {
    fn();
    return COHORT_GLOO_OK;
  } catch (const StoreFailure &e) {
    *err = dup_message(e.what());
    return e.status == COHORT_GLOO_TIMEOUT ? COHORT_GLOO_TIMEOUT : COHORT_GLOO_ERROR;
  } catch (const gloo::IoException &e) {
    *err = dup_message(e.what());
    return classify(e.what(), COHORT_GLOO_IO);
  } catch (const std::exception &e) {
    *err = dup_message(e.what());
    return classify(e.what(), COHORT_GLOO_ERROR);
  } catch (...) {
    *err = dup_message("unknown C++ exception in Gloo");
    return COHORT_GLOO_ERROR;
  }
}

// Gloo's reduction step for bfloat16, which Gloo has no type for: out = bf16(a + b) per
// element, the sum in float32 (exact enough: rounding it to bfloat16 then gives the correctly
// rounded sum of the two bfloat16 values). `out` may be `a`.
void sum_bf16(void *out, const void *a, const void *b, size_t n)
{
  auto *o = static_cast<uint16_t *>(out);
  const auto *x = static_cast<const uint16_t *>(a);
  const auto *y = static_cast<const uint16_t *>(b);
  for (size_t i = 0; i < n; i++)
    o[i] = cohort_f32_to_bf16(cohort_bf16_to_f32(x[i]) + cohort_bf16_to_f32(y[i]));
}

} // namespace

extern "C" int cohort_gloo_new(const CohortGlooStoreOps *ops, int rank, int size,
                               const char *hostname, const char *iface, long timeout_ms,
                               CohortGloo **out, char **err)
{
  *out = nullptr;
  auto g = std::make_unique<CohortGloo>();
  int st = guarded(err, [&] {
    gloo::transport::tcp::attr attr;
    if (iface != nullptr && iface[0] != '\0')
      attr.iface = iface;
    else
      attr.hostname = hostname;
    g->device = gloo::transport::tcp::CreateDevice(attr);
    g->context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    g->context->setTimeout(std::chrono::milliseconds(timeout_ms));
    CallbackStore store(*ops, timeout_ms);
    g->context->connectFullMesh(store, g->device);
  });
  if (st == COHORT_GLOO_OK)
    *out = g.release();
  return st;
}

extern "C" int cohort_gloo_allreduce_sum(CohortGloo *g, void *buf, size_t count, CohortDtype dtype,
                                         long timeout_ms, char **err)
{
  if (count == 0)
    return COHORT_GLOO_OK;
  return guarded(err, [&] {
    gloo::AllreduceOptions opts(g->context);
    opts.setTimeout(std::chrono::milliseconds(timeout_ms));
    if (dtype == COHORT_DTYPE_F32) {
      opts.setOutput(static_cast<float *>(buf), count);
      opts.setReduceFunction(
          static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
    } else if (dtype == COHORT_DTYPE_BF16) {
      opts.setOutput(static_cast<uint16_t *>(buf), count);
      opts.setReduceFunction(&sum_bf16);
    } else {
      opts.setOutput(static_cast<double *>(buf), count);
      opts.setReduceFunction(
          static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<double>));
    }
    gloo::allreduce(opts);
  });
}

extern "C" int cohort_gloo_broadcast(CohortGloo *g, void *buf, size_t nbytes, int root,
                                     long timeout_ms, char **err)
{
  if (nbytes == 0)
    return COHORT_GLOO_OK;
  return guarded(err, [&] {
    gloo::BroadcastOptions opts(g->context);
    opts.setTimeout(std::chrono::milliseconds(timeout_ms));
    opts.setRoot(root);
    opts.setOutput(static_cast<char *>(buf), nbytes);
    gloo::broadcast(opts);
  });
}

extern "C" int cohort_gloo_allgather(CohortGloo *g, const void *send, size_t nbytes, void *recv,
                                     long timeout_ms, char **err)
{
  if (nbytes == 0)
    return COHORT_GLOO_OK;
  return guarded(err, [&] {
    gloo::AllgatherOptions opts(g->context);
    opts.setTimeout(std::chrono::milliseconds(timeout_ms));
    char *out = static_cast<char *>(recv);
    const char *in = static_cast<const char *>(send);
    // Without an input Gloo gathers in place: this rank's bytes are already in its slot.
    if (in != out + nbytes * static_cast<size_t>(g->context->rank))
      opts.setInput(const_cast<char *>(in), nbytes);
    opts.setOutput(out, nbytes * static_cast<size_t>(g->context->size));
    gloo::allgather(opts);
  });
}

extern "C" int cohort_gloo_reduce_scatter_sum(CohortGloo *g, void *send, void *recv,
                                              const size_t *counts, CohortDtype dtype,
                                              long timeout_ms, char **err)
{
  // Gloo's own reduce-scatter (ReduceScatterHalvingDoubling, an old-style algorithm) gave
  // results that changed from run to run with uneven pieces on 3 ranks (its distribution
  // phase sends from the buffer it then copies into): the whole unit is all-reduced instead
  // (Gloo's ring, as the DDP buckets are) and this rank keeps its piece.
  size_t total = 0, before = 0, elt = dtype == COHORT_DTYPE_BF16 ? 2 : 4;
  for (int r = 0; r < g->context->size; r++) {
    before += r < g->context->rank ? counts[r] : 0;
    total += counts[r];
  }
  int st = cohort_gloo_allreduce_sum(g, send, total, dtype, timeout_ms, err);
  size_t mine = counts[g->context->rank];
  if (st == COHORT_GLOO_OK && mine > 0)
    memcpy(recv, static_cast<char *>(send) + before * elt, mine * elt);
  return st;
}

extern "C" int cohort_gloo_allgatherv(CohortGloo *g, void *buf, const size_t *nbytes,
                                      long timeout_ms, char **err)
{
  size_t total = 0;
  for (int r = 0; r < g->context->size; r++)
    total += nbytes[r];
  if (total == 0 || g->context->size == 1)
    return COHORT_GLOO_OK;
  return guarded(err, [&] {
    gloo::AllgathervOptions opts(g->context);
    opts.setTimeout(std::chrono::milliseconds(timeout_ms));
    // Without an input Gloo gathers in place: this rank's bytes are already in its slot.
    opts.setOutput(static_cast<char *>(buf),
                   std::vector<size_t>(nbytes, nbytes + g->context->size));
    gloo::allgatherv(opts);
  });
}

extern "C" int cohort_gloo_barrier(CohortGloo *g, long timeout_ms, char **err)
{
  return guarded(err, [&] {
    gloo::BarrierOptions opts(g->context);
    opts.setTimeout(std::chrono::milliseconds(timeout_ms));
    gloo::barrier(opts);
  });
}

namespace
{

// tcp::Pair::signalExceptionExternal is what Gloo itself calls when a wait times out: it fails
// every operation pending on the pair (waking the threads blocked in them) and closes its
// socket. It is protected; a derived class may name it, which gives a pointer to the member.
struct PairAccess : gloo::transport::tcp::Pair {
  static std::exception_ptr (gloo::transport::tcp::Pair::*signal())(const std::string &)
  {
    return &PairAccess::signalExceptionExternal;
  }
};

} // namespace

extern "C" void cohort_gloo_interrupt(CohortGloo *g, const char *why)
{
  char *err = nullptr;
  guarded(&err, [&] {
    // Closing a pair does not wake this rank's own waits (they would wait out their timeout);
    // an exception signalled on the pair does, and closes its socket, so peers fail too.
    auto signal = PairAccess::signal();
    std::string msg(why);
    for (int i = 0; i < g->context->size; i++) {
      if (i == g->context->rank)
        continue;
      auto *pair = dynamic_cast<gloo::transport::tcp::Pair *>(g->context->getPair(i).get());
      if (pair != nullptr)
        (pair->*signal)(msg);
    }
  });
  free(err);
}

extern "C" void cohort_gloo_close(CohortGloo *g)
{
  char *err = nullptr;
  guarded(&err, [&] { g->context->closeConnections(); });
  free(err);
}

extern "C" void cohort_gloo_free(CohortGloo *g)
{
  if (g == nullptr)
    return;
  char *err = nullptr;
  guarded(&err, [&] {
    g->context.reset();
    g->device.reset();
  });
  free(err);
  delete g;
}
