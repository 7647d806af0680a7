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
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

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

// x = bf16(x + y), for the algorithms that take a two-operand reduction.
void add_bf16(uint16_t *x, const uint16_t *y, size_t n)
{
  sum_bf16(x, x, y, n);
}

const gloo::ReductionFunction<uint16_t> *bf16_sum()
{
  static const gloo::ReductionFunction<uint16_t> fn(gloo::SUM, &add_bf16);
  return &fn;
}

// The halving-doubling reduce-scatter keeps two receive buffers as large as its input, and
// counts in int: inputs are cut into pieces of at most 16 Mi values, each split among the
// ranks as the whole is. COHORT_GLOO_REDUCE_SCATTER_PIECE (values) lowers the cut so tests
// can cover it with small buffers.
size_t reduce_scatter_piece()
{
  static size_t piece = 0;
  if (piece == 0) {
    const char *env = getenv("COHORT_GLOO_REDUCE_SCATTER_PIECE");
    long v = env != nullptr ? atol(env) : 0;
    piece = v > 0 && v < (long(1) << 24) ? static_cast<size_t>(v) : size_t(16) << 20;
  }
  return piece;
}

template <typename T>
void reduce_scatter_pieces(CohortGloo *g, T *send, T *recv, const size_t *counts,
                           const gloo::ReductionFunction<T> *fn)
{
  const int size = g->context->size, rank = g->context->rank;
  std::vector<size_t> begin(size + 1, 0);
  for (int r = 0; r < size; r++)
    begin[r + 1] = begin[r] + counts[r];
  size_t mine = 0;
  for (size_t lo = 0; lo < begin[size]; lo += reduce_scatter_piece()) {
    size_t hi = std::min(begin[size], lo + reduce_scatter_piece());
    std::vector<int> elems(size);
    for (int r = 0; r < size; r++) {
      size_t a = std::max(lo, begin[r]), b = std::min(hi, begin[r + 1]);
      elems[r] = b > a ? static_cast<int>(b - a) : 0;
    }
    std::vector<T *> ptrs{send + lo};
    gloo::ReduceScatterHalvingDoubling<T> algo(g->context, ptrs, static_cast<int>(hi - lo), elems,
                                               fn);
    algo.run();
    // This rank's part of the piece is at the start of it now.
    if (elems[rank] > 0)
      memcpy(recv + mine, send + lo, static_cast<size_t>(elems[rank]) * sizeof(T));
    mine += static_cast<size_t>(elems[rank]);
  }
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
  (void)timeout_ms; // the algorithm waits with the context's timeout
  return guarded(err, [&] {
    if (g->context->size == 1) {
      size_t bytes = counts[0] * (dtype == COHORT_DTYPE_BF16 ? 2 : 4);
      if (bytes > 0 && send != recv)
        memcpy(recv, send, bytes);
      return;
    }
    if (dtype == COHORT_DTYPE_BF16)
      reduce_scatter_pieces(g, static_cast<uint16_t *>(send), static_cast<uint16_t *>(recv), counts,
                            bf16_sum());
    else
      reduce_scatter_pieces(g, static_cast<float *>(send), static_cast<float *>(recv), counts,
                            gloo::ReductionFunction<float>::sum);
  });
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
