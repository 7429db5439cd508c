# Writes OUTPUT, a C++ source defining `extern const char SYMBOL[]` in namespace kvserve with
# the bytes of INPUT and a terminating NUL (the web console's page is built into the binary).
# A line `/*@include NAME*/` in INPUT is replaced by the file NAME next to INPUT (the console's
# scripts live in files of their own).
#   cmake -DINPUT=file -DOUTPUT=file.cpp -DSYMBOL=kName -P EmbedFile.cmake
file(READ "${INPUT}" text)
get_filename_component(dir "${INPUT}" DIRECTORY)
string(REGEX MATCHALL "/\\*@include [A-Za-z0-9_.-]+\\*/" markers "${text}")
foreach(marker IN LISTS markers)
  string(REGEX REPLACE "/\\*@include ([A-Za-z0-9_.-]+)\\*/" "\\1" name "${marker}")
  if(NOT EXISTS "${dir}/${name}")
    message(FATAL_ERROR "${INPUT} includes ${name}, which does not exist")
  endif()
  file(READ "${dir}/${name}" part)
  string(REPLACE "${marker}" "${part}" text "${text}")
endforeach()
file(WRITE "${OUTPUT}.page" "${text}")
file(READ "${OUTPUT}.page" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
file(WRITE "${OUTPUT}.tmp"
     "// Generated from ${INPUT} by cmake/EmbedFile.cmake; do not edit.\n"
     "namespace kvserve {\nextern const char ${SYMBOL}[] = {${bytes}'\\0'};\n}  // namespace kvserve\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
