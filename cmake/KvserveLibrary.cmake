# kvserve_library(<name> SOURCES <files...> PUBLIC <libs...> PRIVATE <libs...>)
# A static library of the given sources (unity files of 8 with KVSERVE_UNITY; sources with their
# own compile options, like the per-ISA kernels, stay apart); an interface library while a module
# has only headers.
function(kvserve_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  if(ARG_SOURCES)
    add_library(${name} STATIC ${ARG_SOURCES})
    set_target_properties(${name} PROPERTIES UNITY_BUILD ${KVSERVE_UNITY} UNITY_BUILD_BATCH_SIZE 8)
    target_link_libraries(${name} PUBLIC ${ARG_PUBLIC} PRIVATE ${ARG_PRIVATE})
  else()
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE ${ARG_PUBLIC})
  endif()
endfunction()
