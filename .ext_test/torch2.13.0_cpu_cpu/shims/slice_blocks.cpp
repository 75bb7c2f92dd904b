#include "/work/main/csrc/slice_blocks.cpp"
