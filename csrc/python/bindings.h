#pragma once

// The parts of lazyfuse._C bound outside module.cpp, one per concept.

#include <pybind11/pybind11.h>

namespace lazyfuse {

namespace py = pybind11;

void BindStepReplay(py::module& m);

}  // namespace lazyfuse
