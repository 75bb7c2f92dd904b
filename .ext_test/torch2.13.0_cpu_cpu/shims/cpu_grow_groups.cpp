#include "/work/main/csrc/cpu/grow_groups.cpp"
