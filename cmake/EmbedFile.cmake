# Writes OUTPUT, a C++ source defining `extern const char SYMBOL[]` in namespace kvserve with
# the bytes of INPUT and a terminating NUL (the web console's page is built into the binary).
#   cmake -DINPUT=file -DOUTPUT=file.cpp -DSYMBOL=kName -P EmbedFile.cmake
file(READ "${INPUT}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
file(WRITE "${OUTPUT}.tmp"
     "// Generated from ${INPUT} by cmake/EmbedFile.cmake; do not edit.\n"
     "namespace kvserve {\nextern const char ${SYMBOL}[] = {${bytes}'\\0'};\n}  // namespace kvserve\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
