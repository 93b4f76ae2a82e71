keep;
if header "subject" "abc { keep; }
