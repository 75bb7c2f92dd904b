#include "/work/main/csrc/cpu/slice_blocks.cpp"
