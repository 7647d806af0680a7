// Debian's libgloo-dev (0.0~git20220518) installs gloo/transport/tcp/pair.h but not the
// gloo/common/memory.h it includes. gloo-shim.cc needs pair.h only to call one exported
// member, tcp::Pair::signalExceptionExternal, on a pair libgloo made; nothing here is
// instantiated or laid out by Cohort's code, so declarations that let the header parse are
// enough. The build adds this folder to the include path only when the real header is missing
// (engine/distributed/meson.build).
#pragma once

#include <memory>

namespace gloo
{

template <typename T> class NonOwningPtr
{
  std::shared_ptr<T> held_;
};

template <typename T> class WeakNonOwningPtr
{
  std::weak_ptr<T> held_;
};

} // namespace gloo
