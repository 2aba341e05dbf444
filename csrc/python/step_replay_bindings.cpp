// lazyfuse._C's step replay surface (python/lazyfuse/replay.py drives it).

#include <torch/csrc/utils/pybind.h>

#include "ltc/static_step.h"
#include "ltc/step_replay.h"
#include "python/bindings.h"

namespace lazyfuse {

void BindStepReplay(py::module& m) {
  py::class_<StepRecord, std::shared_ptr<StepRecord>>(m, "_StepRecord")
      .def_property_readonly("not_replayable",
                             [](const StepRecord& record) { return record.not_replayable; })
      .def_property_readonly(
          "sources",
          [](const StepRecord& record) {
            static const char* names[] = {
                "argument", "transfer", "live", "seed", "frozen", "unspecified"};
            std::vector<std::string> sources;
            for (const RecordedInput& input : record.inputs) {
              sources.emplace_back(std::string(names[static_cast<int>(input.source)]) +
                                   (input.via_base ? " base " : " ") + input.op + " " +
                                   input.call_site);
            }
            return sources;
          })
      .def_property_readonly("writes",
                             [](const StepRecord& record) {
                               std::vector<std::string> writes;
                               for (const RecordedWrite& write : record.writes) {
                                 at::Tensor target(write.target.lock());
                                 writes.push_back("result " + std::to_string(write.result) +
                                                  (write.made_in_call ? " made in call" : "") +
                                                  (IsSet(write.grad_of) ? " grad" : "") +
                                                  (target.defined() ? " " + target.toString() +
                                                                          c10::str(target.sizes())
                                                                    : " (freed)"));
                               }
                               return writes;
                             })
      // The tensors the record binds that are still alive: a periodic check
      // captures over them instead of scanning every Python object.
      .def("bound_tensors",
           [](const StepRecord& record) {
             std::vector<at::Tensor> tensors;
             auto add = [&tensors](const WeakTensor& weak) {
               if (IsSet(weak)) {
                 at::Tensor tensor(weak.lock());
                 if (tensor.defined()) {
                   tensors.push_back(std::move(tensor));
                 }
               }
             };
             for (const RecordedInput& input : record.inputs) {
               add(input.live);
               add(input.grad_of);
             }
             for (const RecordedWrite& write : record.writes) {
               if (!write.argument) {  // bound by position, not by identity
                 add(write.target);
               }
               add(write.grad_of);
             }
             return tensors;
           })
      .def_property_readonly("returns", [](const StepRecord& record) {
        std::vector<std::pair<int, size_t>> returns;
        for (const RecordedReturn& entry : record.returns) {
          returns.emplace_back(static_cast<int>(entry.kind), entry.index);
        }
        return returns;
      });
  m.def("_capture_begin", &BeginCapture);
  m.def("_capturing", &Capturing);
  m.def("_capture_end", &EndCapture);
  m.def("_capture_abort", &AbortCapture);
  // A record's graph may hold a process group (collectives). Destroyed during
  // interpreter teardown, Gloo's threads abort the process: records still
  // alive at exit are kept, as LTC keeps its compile cache.
  m.def("_keep_until_exit", [](std::shared_ptr<StepRecord> record) {
    static auto* kept = new std::vector<std::shared_ptr<StepRecord>>();
    kept->push_back(std::move(record));
  });
  m.def("_record_disagreement",
        [](const StepRecord& previous, const StepRecord& next, bool replaying) {
          return Disagreement(previous, next, replaying);
        });
  m.def("_bind_repeated_tensors",
        [](const StepRecord& previous, StepRecord& next) { BindRepeatedTensors(previous, next); });
  py::class_<StaticStep, std::shared_ptr<StaticStep>>(m, "_StaticStep")
      .def("bind",
           [](StaticStep& step, const std::vector<at::Tensor>& arguments) {
             std::string why;
             bool bound = false;
             {
               py::gil_scoped_release release;
               bound = step.Bind(arguments, &why);
             }
             return py::make_tuple(bound, why);
           })
      .def("run", &StaticStep::Run, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("why", &StaticStep::why)
      .def("finish", &StaticStep::Finish, py::call_guard<py::gil_scoped_release>());
  m.def("_static_step",
        [](std::shared_ptr<StepRecord> record, const std::vector<at::Tensor>& arguments) {
          std::string why;
          std::shared_ptr<StaticStep> step = StaticStep::Plan(std::move(record), arguments, &why);
          return py::make_tuple(std::move(step), why);
        });
  m.def("_replay", [](const StepRecord& record, const std::vector<at::Tensor>& arguments) {
    ReplayOutcome outcome;
    {
      py::gil_scoped_release release;
      outcome = Replay(record, arguments);
    }
    return py::make_tuple(
        static_cast<int>(outcome.status), outcome.why, std::move(outcome.returned));
  });
}

}  // namespace lazyfuse
