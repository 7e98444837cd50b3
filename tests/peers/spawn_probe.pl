# Peer: report the start state of this process, then become PROGRAM (if given).
#
# Usage: perl spawn_probe.pl REPORT [PROGRAM ARGS...]
#
# Perl, not Python or sh, because it changes the least before the first line runs: Python
# ignores SIGPIPE and SIGXFSZ at start, dash empties the signal mask; perl only ignores SIGFPE
# (PERL_FPU_INIT), and opens nothing that stays open (the script is closed once read). The
# state read is the one the supervisor gave it; the exec keeps the pid, session, group, mask
# and ignored signals, so the real peer (a language server, an adapter...) starts with them.
#
# REPORT gets one "key<TAB>value" line each: pid, SigBlk, SigIgn, SigCgt (hex masks, as
# /proc shows them), pgid, sid, scope (SUPERVISOR_SCOPE, if set), cwd, and "fd<TAB>N<TAB>target"
# per open descriptor (the listing's own left out). Written to REPORT.tmp, then renamed.
use strict;
use warnings;

my ($out, @then) = @ARGV;
my @lines = ("pid\t$$");
open(my $fh, "<", "/proc/self/status") or die "status: $!";
while (<$fh>) { push @lines, "$1\t$2" if /^(Sig(?:Blk|Ign|Cgt)):\s*(\S+)/ }
close $fh;
open($fh, "<", "/proc/self/stat") or die "stat: $!";
my $stat = <$fh>;
close $fh;
my @fields = split " ", substr($stat, rindex($stat, ")") + 2);
push @lines, "pgid\t$fields[2]", "sid\t$fields[3]";
{
    open($fh, "<", "/proc/self/environ") or die "environ: $!";
    local $/ = "\0";
    while (<$fh>) { chomp; push @lines, "scope\t$1" if /^SUPERVISOR_SCOPE=(.*)/s }
    close $fh;
}
push @lines, "cwd\t" . readlink("/proc/self/cwd");
opendir(my $dir, "/proc/self/fd") or die "fd: $!";
for my $fd (grep { /^\d+$/ } readdir $dir) {
    my $target = readlink("/proc/self/fd/$fd") // "";
    push @lines, "fd\t$fd\t$target" unless $target eq "/proc/$$/fd";
}
closedir $dir;
open($fh, ">", "$out.tmp") or die "report: $!";
print $fh map { "$_\n" } @lines;
close $fh;
rename("$out.tmp", $out) or die "rename: $!";
if (@then) {
    exec { $then[0] } @then or die "exec $then[0]: $!";
}
