// libFuzzer target: any bytes given to the task graph reader make a TaskGraph or an InputError, and a graph read
// contracts into MetaOps whose levels order every input first: never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fulcrum/core/error.h"
#include "fulcrum/model/task_graph.h"
#include "fulcrum/plan/metaop_graph.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const fulcrum::TaskGraph graph =
        fulcrum::task_graph_from_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    const fulcrum::MetaGraph metas = fulcrum::contract(graph);
    for (const fulcrum::MetaOp& op : metas.ops) {
      for (int input : op.inputs) {
        if (metas.ops[input].level >= op.level) std::abort();
      }
    }
  } catch (const fulcrum::InputError&) {
  }
  return 0;
}
