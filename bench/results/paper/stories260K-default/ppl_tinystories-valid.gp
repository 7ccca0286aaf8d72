set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/stories260K-default/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'stories260K'
plot 3.815771676102655 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 4.711206266965512
20 7.750882430033905
30 14.96351758840769
40 26.65757147521082
e
