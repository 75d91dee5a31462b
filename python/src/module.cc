// The Python module rcoll._C: the backend class (so Python can read its
// counters and diagnostics, abort and shut it down) and the creator that
// rcoll.torch registers with torch.distributed as "rcoll".
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include "backend.h"

namespace py = pybind11;
using rcoll::torch_backend::RcollBackend;

PYBIND11_MODULE(_C, m) {
  m.doc() = "rcoll: resilient collectives as a torch.distributed backend";
  // The c10d Backend type must be registered (by torch.distributed) before ours derives from it.
  py::module::import("torch.distributed");

  py::class_<RcollBackend, c10d::Backend, c10::intrusive_ptr<RcollBackend>>(m, "RcollBackend")
      .def(
          "counters",
          [](const RcollBackend& b) {
            const rcoll::Counters c = b.counters();
            py::dict d;
            d["ops"] = c.ops;
            d["bytes_sent"] = c.bytes_sent;
            d["bytes_received"] = c.bytes_received;
            d["recoveries"] = c.recoveries;
            d["fallbacks"] = c.fallbacks;
            d["probes"] = c.probes;
            d["recovery_seconds"] = c.recovery_seconds;
            d["faults_injected"] = c.faults_injected;
            d["delays_injected"] = c.delays_injected;
            d["epoch"] = c.epoch;
            d["transport"] = c.transport;
            d["device_transport"] = c.device_transport;
            d["nccl_ops"] = c.nccl_ops;
            d["nccl_stops_put_off"] = c.nccl_stops_put_off;
            return d;
          },
          "rcoll's counters for this process group: ops, bytes, recoveries, fallbacks, probes, "
          "injected faults, epoch, transport, device transport, ops on NCCL, NCCL stops put off to "
          "an op's end (a CUDA stream waited at the stream gate)")
      .def("diagnostics", &RcollBackend::diagnostics, py::call_guard<py::gil_scoped_release>(),
           "A human-readable report: identity, epoch, transport, counters and the last ops")
      .def("abort", &RcollBackend::abort, py::call_guard<py::gil_scoped_release>(),
           "Fails every op not yet complete, then closes the communicator")
      .def("shutdown", &RcollBackend::shutdown, py::call_guard<py::gil_scoped_release>(),
           "Waits for issued ops, then closes the communicator");

  m.def("create_backend", &rcoll::torch_backend::create_backend, py::arg("store"), py::arg("rank"), py::arg("world_size"),
        py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "Creates the rcoll backend of one process group (what torch.distributed calls)");
  m.def("shutdown_all", &rcoll::torch_backend::shutdown_all,
        py::call_guard<py::gil_scoped_release>(),
        "Shuts down every rcoll backend of this process (run at interpreter exit)");
  m.def("version", [] { return std::string(rcoll::version_string()); });
}
