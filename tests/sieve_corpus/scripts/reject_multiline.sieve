require "reject";
if header :contains "subject" "release" {
  reject text:
I do not read this list.
..dot-stuffed line
.
;
}
