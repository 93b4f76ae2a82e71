if header :count "gt" "to" "1" { keep; }
