require "fileinto";
if header :is :comparator "i;octet" "subject" "meeting tomorrow at 10" { fileinto "OctetLower"; }
if header :is :comparator "i;octet" "subject" "Meeting tomorrow at 10" { fileinto "OctetExact"; }
if header :is :comparator "i;ascii-casemap" "subject" "MEETING TOMORROW AT 10" { fileinto "Casemap"; }
if header :contains :comparator "i;octet" "from" "ALICE" { fileinto "OctetContains"; }
