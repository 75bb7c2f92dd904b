#include "/work/main/csrc/edge_softmax.cpp"
