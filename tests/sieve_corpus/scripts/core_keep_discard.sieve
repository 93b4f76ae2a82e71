if header :contains "subject" "release" { discard; stop; }
keep;
