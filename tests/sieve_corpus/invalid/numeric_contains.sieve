require "comparator-i;ascii-numeric";
if header :contains :comparator "i;ascii-numeric" "x" "1" { keep; }
