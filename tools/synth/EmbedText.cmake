# EmbedText.cmake: writes a text file as one C++ raw string literal, for #include in an expression.
# Usage: cmake -DINPUT=<text file> -DOUTPUT=<.inc file> -P EmbedText.cmake
file(READ "${INPUT}" text)
# The literal ends at the first )DELIM", so pick a delimiter that the text never contains.
set(delimiter "")
foreach(candidate IN ITEMS glmtext glmtext_1 glmtext_2 glmtext_3 glmtext_4 glmtext_5)
  string(FIND "${text}" ")${candidate}\"" position)
  if(position EQUAL -1)
    set(delimiter "${candidate}")
    break()
  endif()
endforeach()
if(delimiter STREQUAL "")
  message(FATAL_ERROR "${INPUT} contains every raw string delimiter EmbedText.cmake tries")
endif()
get_filename_component(name "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp"
     "// Generated from ${name} by EmbedText.cmake at build time; edit ${name} instead.\n"
     "R\"${delimiter}(${text})${delimiter}\"\n")
# Only touch the output when it changes, so an unrelated reconfigure rebuilds nothing.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
