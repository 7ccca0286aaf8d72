set terminal pngcairo size 800,560 noenhanced
set output '/tmp/opt-high/ppl_ptb.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (ptb)'
set title 'opt-tiny'
plot 796.6734251700406 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
60 796.2599950993119
80 862.184211322443
e
60 797.0009854997612
80 831.7455357097751
e
60 797.5257096104133
80 829.2176885125001
e
60 810.6321020211617
80 836.9968547382355
e
