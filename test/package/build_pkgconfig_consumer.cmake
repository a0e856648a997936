# Compiles and links test/consumer/main.cpp with the flags pkg-config gives for cudaops.
cmake_policy(VERSION 3.25)
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/${LIBDIR}/pkgconfig")
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs cudaops
                OUTPUT_VARIABLE flags RESULT_VARIABLE result OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "pkg-config does not know cudaops under ${PREFIX}")
endif()
message(STATUS "pkg-config --cflags --libs cudaops: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
execute_process(
  COMMAND ${CXX_COMPILER} -std=c++17 ${SOURCE} -o ${OUTPUT} ${flags} -I${CUDA_INCLUDE}
          -L${CUDA_LIBDIR} -lcudart_static -ldl -lpthread -lrt -Wl,-rpath,${PREFIX}/${LIBDIR}
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "compiling the consumer with pkg-config's flags failed")
endif()
