keep;
 discard