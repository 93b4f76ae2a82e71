if header :comparator "i;frob" "x" "1" { keep; }
