// ReactorExecutor: the thread on which the gRPC reactors react to engine output. A
// RequestStream listener runs on the engine thread and must not block it; a reactor's work
// (draining the stream, building and serializing the message, StartWrite or Finish) takes
// the reactor's mutex, which gRPC's threads hold while they run the reactor's own reactions.
// So the listener only posts the reactor here, and this thread does that work.
// The pin methods use instances of their own as worker threads for calls that block.
//
// A WorkerThread (common/worker_thread.h): tasks still queued when it is destroyed are dropped,
// and by then the gRPC server has shut down and every reactor is done.
#pragma once

#include "common/worker_thread.h"

namespace kvserve {

using ReactorExecutor = WorkerThread;

}  // namespace kvserve
