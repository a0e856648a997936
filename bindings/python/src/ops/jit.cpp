// cudaops.jit: compile CUDA C++ at run time and launch it on any framework's arrays.
#include "cudaops/jit.h"

#include <cstring>

#include "../array_import.h"
#include "../import_detail.h"
#include "../ops.h"

namespace cudaops::python {

namespace {

std::vector<std::string> option_list(py::handle options) {
  if (py::isinstance<py::str>(options) || py::isinstance<py::bytes>(options)) {
    throw py::type_error(
        "jit.compile: options must be a sequence of strings, such as ('-DN=4', '-lineinfo'), "
        "not one string");
  }
  std::vector<std::string> out;
  size_t index = 0;
  for (py::handle item : py::iter(options)) {
    if (!py::isinstance<py::str>(item)) {
      throw py::type_error("jit.compile: options[" + std::to_string(index) +
                           "] must be a str, got " + type_name(item));
    }
    out.push_back(item.cast<std::string>());
    ++index;
  }
  return out;
}

jit::Kernel compile(const std::string& source, const std::string& name, py::handle options) {
  jit::CompileRequest request;
  request.source = source;
  request.kernel = name;
  request.options = option_list(options);
  request.file_name = "<jit: " + name + ">.cu";
  // Quoted includes of the source are looked up from the current directory, as for a file there.
  jit::Kernel kernel;
  Status status;
  {
    py::gil_scoped_release nogil;
    status = jit::compile(request, &kernel);
  }
  check(status);
  return kernel;
}

jit::Dim3 dims(py::handle value, const char* what) {
  uint32_t d[3] = {1, 1, 1};
  auto one = [&](py::handle item, int axis) {
    if (!PyLong_Check(item.ptr()) || PyBool_Check(item.ptr())) {
      throw py::type_error(std::string("jit kernel: ") + what +
                           " must be an int or a tuple of 1 to 3 ints, got " + type_name(item));
    }
    const long long v = item.cast<long long>();
    if (v < 1 || v > 0xffffffffLL) {
      throw py::value_error(std::string("jit kernel: ") + what + "[" + std::to_string(axis) +
                            "] must be >= 1, got " + std::to_string(v));
    }
    d[axis] = static_cast<uint32_t>(v);
  };
  if (py::isinstance<py::tuple>(value) || py::isinstance<py::list>(value)) {
    const py::sequence seq = py::reinterpret_borrow<py::sequence>(value);
    if (seq.size() < 1 || seq.size() > 3) {
      throw py::value_error(std::string("jit kernel: ") + what +
                            " must have 1 to 3 dimensions, got " + std::to_string(seq.size()));
    }
    for (size_t i = 0; i < seq.size(); ++i)
      one(seq[i], static_cast<int>(i));
  } else {
    one(value, 0);
  }
  return jit::Dim3(d[0], d[1], d[2]);
}

void launch(const jit::Kernel& kernel, py::handle grid, py::handle block, const py::args& args,
            py::handle shared_mem, py::handle stream) {
  const std::string op = "jit kernel " + kernel.info().lowered_name;
  const jit::Dim3 grid_dims = dims(grid, "grid");
  const jit::Dim3 block_dims = dims(block, "block");
  const int64_t shared_value = detail::as_int(shared_mem, op.c_str(), "shared_mem", "the value");
  if (shared_value < 0 || shared_value > INT32_MAX) {
    throw py::value_error(op + ": shared_mem: expected bytes in [0, 2^31), got " +
                          std::to_string(shared_value));
  }
  const auto shared_bytes = static_cast<size_t>(shared_value);

  CallContext ctx(op.c_str(), stream);
  // Arguments: 8-byte pointers for arrays, the bytes of typed scalars.
  std::vector<std::string> names(args.size());
  std::vector<std::unique_ptr<ArrayView>> views;
  std::vector<std::string> values(args.size());
  std::vector<bool> is_array(args.size(), false);
  for (size_t i = 0; i < args.size(); ++i) {
    py::handle arg = args[i];
    names[i] = "args[" + std::to_string(i) + "]";
    if (py::hasattr(arg, "__cudaops_kernel_arg__")) {
      py::object bytes = arg.attr("__cudaops_kernel_arg__")();
      if (!py::isinstance<py::bytes>(bytes)) {
        throw py::type_error(op + ": " + names[i] + ": __cudaops_kernel_arg__ must return bytes");
      }
      values[i] = bytes.cast<std::string>();
      continue;
    }
    if (PyLong_Check(arg.ptr()) || PyFloat_Check(arg.ptr()) || PyBool_Check(arg.ptr())) {
      throw py::type_error(op + ": " + names[i] + ": a Python " + type_name(arg) +
                           " has no C type; pass it typed, e.g. cudaops.jit.int32(n), "
                           "cudaops.jit.float32(x)");
    }
    // A kernel may write any array it is given: arrays are imported writable, and a read-only
    // one is taken only when wrapped in cudaops.jit.readonly(), the caller's promise.
    const bool promised = py::hasattr(arg, "__cudaops_readonly__");
    const py::object array = promised ? py::object(arg.attr("__cudaops_readonly__"))
                                      : py::reinterpret_borrow<py::object>(arg);
    views.push_back(std::make_unique<ArrayView>(ctx.import(
        array, names[i].c_str(), promised ? Access::kRead : Access::kWrite, Elements::kAny)));
    void* data = views.back()->data;
    values[i].assign(reinterpret_cast<const char*>(&data), sizeof(data));
    is_array[i] = true;
  }
  std::vector<const ArrayView*> pointers;
  pointers.reserve(views.size());
  for (const auto& view : views)
    pointers.push_back(view.get());
  ctx.prepare(pointers);

  // The parameters of the kernel on this device: count and sizes must match.
  std::vector<jit::Parameter> parameters;
  check(kernel.parameters(&parameters));
  if (parameters.size() != args.size()) {
    throw py::type_error(op + ": the kernel takes " + std::to_string(parameters.size()) +
                         " arguments, got " + std::to_string(args.size()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (values[i].size() != parameters[i].size) {
      throw py::type_error(
          op + ": " + names[i] + ": parameter " + std::to_string(i) + " takes " +
          std::to_string(parameters[i].size) + " bytes, got " +
          (is_array[i] ? "an array (an 8-byte pointer)"
                       : type_name(args[i]) + " (" + std::to_string(values[i].size()) + " bytes)"));
    }
  }
  std::vector<void*> slots(args.size());
  for (size_t i = 0; i < args.size(); ++i)
    slots[i] = values[i].data();
  Status status;
  {
    py::gil_scoped_release nogil;
    status = kernel.launch(grid_dims, block_dims, slots.data(), slots.size(), shared_bytes,
                           ctx.stream());
  }
  check(status);
}

py::object cache_source(const jit::Kernel& kernel) {
  switch (kernel.info().source) {
    case jit::CacheSource::kCompiled:
      return py::none();
    case jit::CacheSource::kMemoryCache:
      return py::str("memory");
    case jit::CacheSource::kDiskCache:
      return py::str("disk");
  }
  return py::none();
}

void bind_jit(py::module_& m) {
  py::class_<jit::Kernel>(m, "JitKernel", R"doc(A kernel compiled by cudaops.jit.compile().

Call it as kernel(grid, block, *args, shared_mem=0, stream=None): grid and block are ints or
tuples of 1 to 3 ints; each arg is a CUDA array of any framework (DLPack or
__cuda_array_interface__; its data pointer is passed) or a typed scalar such as
cudaops.jit.int32(n). The launch runs on the device of the array arguments and is ordered after
their producers, like every op.)doc")
      .def("__call__", &launch, py::arg("grid"), py::arg("block"), py::kw_only(),
           py::arg("shared_mem") = 0, py::arg("stream") = py::none(),
           "__call__(self, grid, block, *args, shared_mem=0, stream=None)\n--\n\n")
      .def_property_readonly(
          "name", [](const jit::Kernel& k) { return k.info().lowered_name; },
          "the symbol launched (the lowered name of a template)")
      .def_property_readonly("arch", [](const jit::Kernel& k) { return k.info().arch; })
      .def_property_readonly("registers",
                             [](const jit::Kernel& k) { return k.resources().registers; })
      .def_property_readonly("barriers",
                             [](const jit::Kernel& k) { return k.resources().barriers; })
      .def_property_readonly("spill_store_bytes",
                             [](const jit::Kernel& k) { return k.resources().spill_store_bytes; })
      .def_property_readonly("spill_load_bytes",
                             [](const jit::Kernel& k) { return k.resources().spill_load_bytes; })
      .def_property_readonly("stack_frame_bytes",
                             [](const jit::Kernel& k) { return k.resources().stack_frame_bytes; })
      .def_property_readonly(
          "shared_bytes", [](const jit::Kernel& k) { return k.resources().static_shared_bytes; },
          "static shared memory per block")
      .def_property_readonly(
          "max_threads_per_block",
          [](const jit::Kernel& k) {
            int value = 0;
            check(k.max_threads_per_block(&value));
            return value;
          },
          "on the current device (loads the kernel there)")
      .def_property_readonly(
          "num_params",
          [](const jit::Kernel& k) {
            std::vector<jit::Parameter> parameters;
            check(k.parameters(&parameters));
            return parameters.size();
          },
          "the number of kernel parameters (loads the kernel on the current device)")
      .def_property_readonly("from_cache", &cache_source,
                             "None (compiled by this call), 'memory' or 'disk'")
      .def_property_readonly(
          "compile_ms", [](const jit::Kernel& k) { return k.info().nvrtc_ms; },
          "NVRTC's time, in this call or when the cached entry was made")
      .def_property_readonly(
          "total_ms", [](const jit::Kernel& k) { return k.info().total_ms; },
          "this compile() call, cache lookup included")
      .def_property_readonly("key", [](const jit::Kernel& k) { return k.info().key; })
      .def_property_readonly(
          "not_stored_reason", [](const jit::Kernel& k) { return k.info().not_stored_reason; },
          "why the compiled kernel was not written to the disk cache, or ''")
      .def_property_readonly(
          "not_loaded_reason", [](const jit::Kernel& k) { return k.info().not_loaded_reason; },
          "why a disk cache entry was there but not used (corrupt, or a directory others can "
          "write), or ''")
      .def_property_readonly("log", [](const jit::Kernel& k) { return k.info().log; })
      .def_property_readonly("ptx", [](const jit::Kernel& k) { return k.ptx(); })
      .def_property_readonly(
          "cubin",
          [](const jit::Kernel& k) { return py::bytes(k.cubin().data(), k.cubin().size()); })
      .def("__repr__", [](const jit::Kernel& k) {
        return "<cudaops.jit.Kernel " + k.info().lowered_name + " for " + k.info().arch + ", " +
               std::to_string(k.resources().registers) + " registers>";
      });

  m.def("_jit_compile", &compile, py::arg("source"), py::arg("name"), py::arg("options"),
        "_jit_compile(source, name, options)\n--\n\n");
  m.def(
      "_jit_clear_cache", [](bool memory, bool disk) { check(jit::clear_cache(memory, disk)); },
      py::arg("memory") = true, py::arg("disk") = true,
      "_jit_clear_cache(memory=True, disk=True)\n--\n\n");
  m.def(
      "_jit_cache_dir",
      []() {
        const jit::CacheConfig config = jit::cache_config();
        return config.disk_enabled && !config.directory.empty()
                   ? py::object(py::str(config.directory + "/" + jit::kCacheSubdirectory))
                   : py::object(py::none());
      },
      "_jit_cache_dir()\n--\n\n");
  m.def(
      "_jit_set_cache",
      [](const py::object& directory, const py::object& enabled, const py::object& max_bytes) {
        jit::CacheConfig config = jit::cache_config();
        if (!directory.is_none()) config.directory = py::str(directory).cast<std::string>();
        if (!enabled.is_none()) config.disk_enabled = enabled.cast<bool>();
        if (!max_bytes.is_none()) {
          const long long value = max_bytes.cast<long long>();
          if (value <= 0) throw py::value_error("jit.set_cache: max_bytes must be > 0");
          config.max_bytes = static_cast<uint64_t>(value);
        }
        check(jit::set_cache_config(config));
      },
      py::arg("directory"), py::arg("enabled"), py::arg("max_bytes"),
      "_jit_set_cache(directory, enabled, max_bytes)\n--\n\n");
  m.def(
      "_jit_nvrtc",
      []() {
        std::string text;
        check(jit::nvrtc_description(&text));
        return text;
      },
      "_jit_nvrtc()\n--\n\n");
}

}  // namespace

CUDAOPS_PYTHON_OPS("jit", bind_jit);

}  // namespace cudaops::python
