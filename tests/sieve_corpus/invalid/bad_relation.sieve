require "relational";
keep;
if header :value "xx" "x" "1" { keep; }
