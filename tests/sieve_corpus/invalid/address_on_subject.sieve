if address "subject" "a" { keep; }
